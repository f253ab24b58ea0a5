"""A conformance kit for plugins: one call per plugin kind, run from a plugin's own tests.

In the spirit of scikit-learn's ``check_estimator``: each ``check_*`` function
exercises what the toolkit will call on a plugin and raises ``AssertionError``
with a message naming the contract that failed. Each returns the names of the
checks it ran, so a test can show them::

    from alilama_core.testing import check_positional_scheme

    def test_my_scheme_conforms():
        check_positional_scheme("kerple-log")

``check_positional_scheme`` and ``check_attention_backend`` build tiny models
on the CPU (a second or two); ``check_tokenizer`` trains on a few lines;
``check_trainer`` trains a tiny model for a few steps on a prepared data folder.
The built-in plugins pass every check in Alilama's own test suite.
"""

from __future__ import annotations

import json
import tempfile
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alilama_core.errors import AlilamaError, ConfigError, TokenizerError

__all__ = [
    "check_attention_backend",
    "check_positional_scheme",
    "check_task",
    "check_tokenizer",
    "check_trainer",
    "registered",
    "tiny_model_config",
]

TRICKY_TEXTS = (
    "",
    "hello world",
    "  leading and trailing spaces  ",
    "line one\nline two\r\n\ttabbed",
    "Ünïcödé, 日本語, emoji 🙂🚀 and a ZWJ 👩‍👩‍👧",
    "numbers 1234567 and punctuation!?...",
)
"""Strings every tokenizer must round-trip exactly."""


def _fail(what: str, why: str) -> AssertionError:
    return AssertionError(f"{what}: {why}")


@contextmanager
def registered(kind: str, name: str, target: Any) -> Iterator[str]:
    """Register ``target`` as ``kind`` ``name`` for the duration of a ``with`` block (for unregistered classes)."""
    from alilama_core.hookspecs import hookimpl
    from alilama_core.registry import HOOKS, get_registry

    def register_one(register):
        register(name, target)

    plugin = types.SimpleNamespace(**{HOOKS[kind]: hookimpl(register_one)})
    registry = get_registry()
    plugin_name = registry.register_plugin(plugin, name=f"conformance-{kind}-{name}")
    try:
        yield name
    finally:
        registry.unregister_plugin(plugin_name)


def _name(kind: str, scheme: Any) -> tuple[str, Any]:
    """(registry name, context manager) for a name or a class given to a check."""
    if isinstance(scheme, str):
        return scheme, _nothing()
    name = f"conformance-{getattr(scheme, '__name__', 'plugin').lower()}"
    return name, registered(kind, name, scheme)


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def tiny_model_config(**overrides: Any):
    """A CPU-sized ``ModelConfig`` (2 layers, 4 heads of 8) for conformance checks."""
    from alilama_core.config import ModelConfig

    base = dict(
        vocab_size=61,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_mlp=64,
        context_length=16,
        positional="alibi",
        attention="eager",
    )
    base.update(overrides)
    return ModelConfig(**base)


def _check_twins(what: str, ref, other, x, logits_differ: str, gradient_differs: Callable[[str], str]) -> None:
    """``other`` gives ``ref``'s logits on ``x`` and, after a backward pass, its parameter gradients."""
    import torch

    a, b = ref(x), other(x)
    if not torch.allclose(a, b, atol=1e-4, rtol=1e-4):
        raise _fail(what, f"{logits_differ} (max {(a - b).abs().max():.2e})")
    a.float().logsumexp(-1).mean().backward()
    b.float().logsumexp(-1).mean().backward()
    for (pname, pa), (_, pb) in zip(ref.named_parameters(), other.named_parameters()):
        if pa.grad is not None and not torch.allclose(pa.grad, pb.grad, atol=1e-4, rtol=1e-3):
            raise _fail(what, gradient_differs(pname))


def _twins(config, attention: str, options: dict[str, Any] | None = None):
    """The eager reference and a model with ``attention`` (set up with ``options``) holding the same weights."""
    import torch

    from alilama_core.model import build_model

    torch.manual_seed(0)
    ref = build_model(config)
    other = build_model(_replace(config, attention=attention, attention_options=dict(options or {})))
    other.load_state_dict(ref.state_dict())
    return ref, other


def _replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def _cpu_backends(config, training: bool, exact_only: bool = False) -> list[str]:
    """Registered backends that can run ``config``'s scheme on the CPU here, routers excluded.

    ``exact_only``: only those that declare exact attention (the ones to compare with eager).
    """
    import torch

    from alilama_core.interfaces import AttentionCase, attention_backend
    from alilama_core.registry import get_registry

    registry = get_registry()
    scheme = registry.get("positional", config.positional)
    names = []
    for name in registry.names("attention"):
        try:
            backend = attention_backend(registry.get("attention", name))
        except AlilamaError:
            continue
        case = AttentionCase(
            device="cpu",
            dtype=torch.float32,
            head_dim=config.d_model // config.n_heads,
            shape="short",
            kind=scheme.kind,
            has_slopes=scheme.has_slopes,
            training=training,
        )
        if exact_only and not backend.exact:
            continue
        if backend.supports(scheme) and backend.refuses(case) is None:
            names.append(name)
    return names


def check_positional_scheme(
    scheme: str | type, *, options: dict[str, Any] | None = None, backends: Sequence[str] | None = None
) -> list[str]:
    """Check a positional scheme (a registered name, or a ``PositionalScheme`` subclass) against its contract.

    Shapes and dtypes of its kind's method, a bias that agrees with itself under
    a cache offset and with ``slopes()``, cached against uncached logits,
    gradients that reach its parameters (and a bias that follows them, in a
    frozen model too: never stale), every available CPU backend against eager
    (forward and gradients), save and load, and a clear error for an unknown option.
    """
    import torch

    from alilama_core.checkpoint import load_weights, save_weights
    from alilama_core.interfaces import PositionalScheme
    from alilama_core.model import KVCache, build_model
    from alilama_core.registry import get_positional

    done: list[str] = []
    name, ctx = _name("positional", scheme)
    with ctx:
        cls = get_positional(name)
        what = f"positional scheme {name!r}"
        if not (isinstance(cls, type) and issubclass(cls, PositionalScheme)):
            raise _fail(what, f"registered object {cls!r} is not a PositionalScheme subclass")
        if cls.kind not in ("bias", "rotary", "embedding", "none"):
            raise _fail(what, f"kind must be bias, rotary, embedding or none, not {cls.kind!r}")
        config = tiny_model_config(positional=name, positional_options=dict(options or {}))
        config.validate()
        torch.manual_seed(0)
        model = build_model(config)
        pos = model.positional
        H, C = config.n_heads, config.d_model
        done.append("kind")

        # The kind's own method: shapes and dtypes, and agreement under a cache offset.
        with torch.no_grad():
            if cls.kind == "bias":
                full = pos.bias(torch.arange(9), torch.arange(9))
                if tuple(full.shape) != (H, 9, 9) or not full.is_floating_point():
                    raise _fail(
                        what,
                        f"bias(q_pos, k_pos) must be a float (H, T, S) = ({H}, 9, 9) tensor, got {tuple(full.shape)} {full.dtype}",
                    )
                part = pos.bias(torch.arange(5, 9), torch.arange(9))  # queries after a cache of 5
                if not torch.allclose(part, full[:, 5:9], atol=1e-5):
                    raise _fail(what, "bias() for queries 5..8 differs from rows 5..8 of the full bias (cache offset)")
                if (reason := pos.check_slopes()) is not None:
                    raise _fail(what, f"has_slopes is declared but {reason}")
            elif cls.kind == "rotary":
                x = torch.randn(2, H, 7, C // H)
                out = pos.rotate(x, torch.arange(7))
                if out.shape != x.shape or out.dtype != x.dtype:
                    raise _fail(
                        what,
                        f"rotate() must keep shape and dtype {tuple(x.shape)} {x.dtype}, got {tuple(out.shape)} {out.dtype}",
                    )
                rows = pos.rotate(x, torch.arange(7).expand(2, -1))  # per-row (B, T) positions
                if not torch.allclose(out, rows, atol=1e-5):
                    raise _fail(what, "rotate() with (B, T) positions differs from (T,) positions")
            elif cls.kind == "embedding":
                emb = pos.embed(torch.arange(7))
                if tuple(emb.shape) != (7, C):
                    raise _fail(what, f"embed((T,)) must be (T, C) = (7, {C}), got {tuple(emb.shape)}")
                if tuple(pos.embed(torch.arange(7).expand(2, -1)).shape) != (2, 7, C):
                    raise _fail(what, "embed((B, T)) must be (B, T, C)")
        done.append("shapes")

        # Logits: shape, dtype, finite; a KV cache gives the same logits as a full pass.
        x = torch.randint(0, config.vocab_size, (2, 12))
        model.eval()
        with torch.no_grad():
            logits = model(x)
            if tuple(logits.shape) != (2, 12, config.vocab_size) or logits.dtype != torch.float32:
                raise _fail(
                    what,
                    f"logits must be float32 (2, 12, {config.vocab_size}), got {tuple(logits.shape)} {logits.dtype}",
                )
            if not torch.isfinite(logits).all():
                raise _fail(what, "logits are not finite")
            cache = KVCache()
            steps = [model(x[:, :5], cache=cache)] + [model(x[:, t : t + 1], cache=cache) for t in range(5, 12)]
            cached = torch.cat(steps, dim=1)  # (2, 12, V)
            if not torch.allclose(cached, logits, atol=1e-4, rtol=1e-4):
                raise _fail(what, f"cached and uncached logits differ (max {(cached - logits).abs().max():.2e})")
        done.append("cached == uncached")

        # Gradients reach the scheme's parameters, and a trained bias is never stale.
        params = [p for p in pos.parameters() if p.requires_grad]
        if params:
            model.train()
            for step in range(2):  # two steps: a bias kept from the first graph would fail the second backward
                model.zero_grad()
                loss = model(x).float().logsumexp(-1).mean()
                loss.backward()
            for pname, p in pos.named_parameters():
                if p.requires_grad and (
                    p.grad is None or not torch.isfinite(p.grad).all() or not p.grad.abs().sum() > 0
                ):
                    raise _fail(what, f"no finite, non-zero gradient reaches parameter {pname!r}")
            for backend in [None, *_cpu_backends(config, training=False)]:
                m = model if backend is None else _with_backend(model, config, backend)
                m.eval()
                trains = [p.requires_grad for p in m.parameters()]
                for frozen in (False, True):  # frozen: a bias kept between passes must follow new values too
                    if frozen:
                        m.requires_grad_(False)
                    with torch.no_grad():
                        m(x)  # a pass that may keep the bias
                        before = m(x)
                        for p in m.positional.parameters():
                            p.add_(0.25)
                        after = m(x)
                        for p in m.positional.parameters():
                            p.sub_(0.25)
                    if torch.allclose(before, after):
                        raise _fail(
                            what,
                            f"logits did not change when the scheme's parameters changed "
                            f"(stale bias on {backend or config.attention}{', frozen' if frozen else ''})",
                        )
                for p, grad in zip(m.parameters(), trains):
                    p.requires_grad_(grad)
            done.append("gradients reach parameters; bias follows them")

        # Every available CPU backend computes what eager computes, forward and backward
        # (those that declare exact=False compute something else, so they are left out).
        for backend in backends if backends is not None else _cpu_backends(config, training=True, exact_only=True):
            if backend == config.attention:
                continue
            ref, other = _twins(config, backend)
            xs = torch.randint(0, config.vocab_size, (2, 12))
            _check_twins(
                what,
                ref,
                other,
                xs,
                f"{backend!r} logits differ from eager",
                lambda pname: f"{backend!r} gradient of {pname} differs from eager",
            )
            done.append(f"{backend} == eager")

        # Save and load: the weights (the scheme's parameters included) come back.
        with tempfile.TemporaryDirectory() as tmp:
            save_weights(model, tmp)
            fresh = build_model(config)
            load_weights(fresh, tmp)
            fresh.eval()
            model.eval()
            with torch.no_grad():
                if not torch.equal(fresh(x), model(x)):
                    raise _fail(what, "logits differ after save_weights and load_weights")
        done.append("save and load")

        # Bad input: an unknown option is a ConfigError naming it.
        try:
            tiny_model_config(positional=name, positional_options={"no_such_option": 1}).validate()
        except ConfigError as exc:
            if "no_such_option" not in str(exc):
                raise _fail(what, f"the error for an unknown option does not name it: {exc}") from None
        else:
            raise _fail(what, "an unknown key in model.positional_options was accepted")
        done.append("unknown option refused")
    return done


def _with_backend(model, config, backend: str):
    from alilama_core.model import build_model

    other = build_model(_replace(config, attention=backend))
    other.load_state_dict(model.state_dict())
    return other


def check_attention_backend(
    backend: str,
    *,
    schemes: Sequence[str] = ("alibi", "rope", "learned", "nope"),
    options: dict[str, Any] | None = None,
) -> list[str]:
    """Check a registered attention backend against eager on every scheme it supports (CPU, float32).

    Forward logits and gradients of a tiny model, a KV cache (prompt then single
    tokens), and a left-padded batch when it declares ``padding``; a backend
    that cannot run here (``check()``) is reported, not failed. ``options``: its
    ``model.attention_options``.

    A backend that declares ``exact=False`` (a sliding window, approximate
    attention) computes something else than eager, so it is not compared with
    eager (the result says so). It is checked against itself instead: finite
    logits and gradients, causality (a later token never changes an earlier
    logit), KV-cache decoding equal to its own full pass, and padded keys
    that change nothing. A backend that declares ``exact=True`` but differs
    from eager fails.
    """
    import torch

    from alilama_core.interfaces import AttentionBackend, attention_backend
    from alilama_core.model import KVCache
    from alilama_core.registry import get_attention, get_positional

    what = f"attention backend {backend!r}"
    obj = get_attention(backend)
    if not isinstance(obj, AttentionBackend):
        raise _fail(what, f"registered object {obj!r} is not an AttentionBackend")
    info = attention_backend(obj)
    if (reason := info.available()) is not None:
        return [f"skipped: {reason}"]
    done: list[str] = []
    for scheme in schemes:
        config = tiny_model_config(positional=scheme)
        if not info.supports(get_positional(scheme)) or (
            info.resolve is None and backend not in _cpu_backends(config, training=True)
        ):
            continue
        if not info.exact:
            _check_inexact(what, config, backend, options, info.padding)
            done.append(f"{scheme}: causal, cached == uncached, padding hidden (not compared with eager: exact=False)")
            continue
        ref, other = _twins(config, backend, options)
        x = torch.randint(0, config.vocab_size, (2, 12))
        _check_twins(
            what,
            ref,
            other,
            x,
            f"logits with {scheme!r} differ from eager",
            lambda pname: f"gradient of {pname} with {scheme!r} differs from eager",
        )
        ref.eval()
        other.eval()
        with torch.no_grad():
            cache = KVCache()
            steps = [other(x[:, :6], cache=cache)] + [other(x[:, t : t + 1], cache=cache) for t in range(6, 12)]
            cached = torch.cat(steps, dim=1)
            want = ref(x)
            if not torch.allclose(cached, want, atol=1e-4, rtol=1e-4):
                raise _fail(
                    what,
                    f"KV-cache decoding with {scheme!r} differs from eager (max {(cached - want).abs().max():.2e})",
                )
            if info.padding:
                mask = torch.ones(2, 12, dtype=torch.bool)
                mask[0, :3] = False  # row 0 is left-padded by 3
                p_ref, p_other = ref(x, key_padding_mask=mask), other(x, key_padding_mask=mask)
                if (
                    not torch.allclose(p_ref[0, 3:], p_other[0, 3:], atol=1e-4, rtol=1e-4)
                    or not torch.isfinite(p_other).all()
                ):
                    raise _fail(what, f"a left-padded batch with {scheme!r} differs from eager")
        done.append(f"{scheme} == eager")
    if not done:  # e.g. a GPU-only kernel, or one that refuses these head sizes on the CPU
        return [f"skipped: it runs none of {', '.join(schemes)} on this machine's CPU"]
    return done


def _check_inexact(what: str, config, backend: str, options: dict[str, Any] | None, padding: bool) -> None:
    """A backend that declares ``exact=False``, against itself (see ``check_attention_backend``)."""
    import torch

    from alilama_core.model import KVCache, build_model

    torch.manual_seed(0)
    model = build_model(_replace(config, attention=backend, attention_options=dict(options or {})))
    scheme = config.positional
    x = torch.randint(0, config.vocab_size, (2, 12))
    logits = model(x)
    if not torch.isfinite(logits).all():
        raise _fail(what, f"logits with {scheme!r} are not finite")
    logits.float().logsumexp(-1).mean().backward()
    grads = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
    if not grads:
        raise _fail(what, f"no gradient reaches the model's parameters with {scheme!r}")
    for pname, grad in grads:
        if not torch.isfinite(grad).all():
            raise _fail(what, f"gradient of {pname} with {scheme!r} is not finite")
    model.eval()
    with torch.no_grad():
        full = model(x)
        later = x.clone()
        later[:, 8:] = (later[:, 8:] + 1) % config.vocab_size
        if not torch.allclose(model(later)[:, :8], full[:, :8], atol=1e-5, rtol=1e-5):
            raise _fail(what, f"with {scheme!r}, changing tokens 8.. changed the logits before them: not causal")
        cache = KVCache()
        steps = [model(x[:, :6], cache=cache)] + [model(x[:, t : t + 1], cache=cache) for t in range(6, 12)]
        cached = torch.cat(steps, dim=1)
        if not torch.allclose(cached, full, atol=1e-4, rtol=1e-4):
            raise _fail(
                what,
                f"KV-cache decoding with {scheme!r} differs from its own full pass (max {(cached - full).abs().max():.2e})",
            )
        if padding:
            mask = torch.ones(2, 12, dtype=torch.bool)
            mask[0, :3] = False  # row 0 is left-padded by 3
            other = x.clone()
            other[0, :3] = (other[0, :3] + 1) % config.vocab_size  # different tokens under the padding
            a, b = model(x, key_padding_mask=mask), model(other, key_padding_mask=mask)
            if not torch.isfinite(a).all() or not torch.allclose(a[0, 3:], b[0, 3:], atol=1e-5, rtol=1e-5):
                raise _fail(what, f"with {scheme!r}, padded keys changed the logits of real tokens (or gave NaN)")


def check_tokenizer(
    tokenizer: str | type,
    *,
    vocab_size: int = 300,
    texts: Sequence[str] | None = None,
    options: dict[str, Any] | None = None,
) -> list[str]:
    """Check a tokenizer (registered name or ``Tokenizer`` subclass) against its contract.

    Training with a special token, exact round trips of tricky strings,
    ``encode_batch`` and ``encode_file`` equal to ``encode``, special tokens and
    ``eot_id``, ``decode_bytes``, ``describe``, save and load through the folder's
    recorded kind, the optional Hugging Face export when declared, and clear
    errors for an unknown option and a folder that holds no tokenizer.
    """
    import numpy as np

    from alilama_core.checkpoint import load_tokenizer
    from alilama_core.registry import get_tokenizer
    from alilama_core.tokenizer import Tokenizer, save_tokenizer

    done: list[str] = []
    name, ctx = _name("tokenizer", tokenizer)
    with ctx:
        cls = get_tokenizer(name)
        what = f"tokenizer {name!r}"
        if not (isinstance(cls, type) and issubclass(cls, Tokenizer)):
            raise _fail(what, f"registered object {cls!r} is not a Tokenizer subclass")
        corpus = list(
            texts
            or [
                "Once upon a time, there was a little girl named Lily. She loved to play outside. " * 3,
                "One day, a little dog saw a big red ball in the park and barked: woof, woof! " * 3,
                *TRICKY_TEXTS,
            ]
        )
        tok = cls.train(corpus, vocab_size, special_tokens=["<|endoftext|>"], **cls.check_options(options))
        if not isinstance(tok, cls):
            raise _fail(what, f"train() returned {type(tok).__name__}, not {cls.__name__}")
        if not 0 < tok.vocab_size <= vocab_size:
            raise _fail(what, f"vocab_size {tok.vocab_size} is outside 1..{vocab_size} (the requested size)")
        eot = tok.special_tokens.get("<|endoftext|>")
        if eot is None or tok.eot_id != eot or not 0 <= eot < tok.vocab_size:
            raise _fail(
                what, f"the special token <|endoftext|> must get an id below vocab_size; got {tok.special_tokens}"
            )
        done.append("train")
        for text in TRICKY_TEXTS:
            ids = tok.encode(text)
            if any(not isinstance(i, int) or not 0 <= i < tok.vocab_size for i in ids):
                raise _fail(what, f"encode({text!r}) gave ids outside 0..vocab_size-1 or not int: {ids[:10]}")
            if tok.decode(ids) != text:
                raise _fail(what, f"decode(encode({text!r})) gave {tok.decode(ids)!r}")
            if tok.decode_bytes(ids) != text.encode("utf-8"):
                raise _fail(what, f"decode_bytes(encode({text!r})) is not its UTF-8")
        done.append("round trips")
        if tok.encode_batch(list(TRICKY_TEXTS)) != [tok.encode(t) for t in TRICKY_TEXTS]:
            raise _fail(what, "encode_batch(texts) differs from [encode(t) for t in texts]")
        marked = "a story<|endoftext|>another"
        ids = tok.encode(marked, allowed_special="all")
        if eot not in ids or tok.decode(ids) != marked:
            raise _fail(what, "encode(..., allowed_special='all') must encode <|endoftext|> as its id and decode back")
        try:
            tok.encode(marked)
        except TokenizerError:
            pass
        else:
            raise _fail(what, "encode() of text holding a special token must raise TokenizerError by default")
        done.append("special tokens")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "text.txt"
            path.write_text("\n".join(corpus[:2]) + "<|endoftext|>" + TRICKY_TEXTS[4], encoding="utf-8")
            got = tok.encode_file(path)
            want = tok.encode(path.read_text(encoding="utf-8"), allowed_special="all")
            if not isinstance(got, np.ndarray) or got.ndim != 1 or got.tolist() != want:
                raise _fail(
                    what, "encode_file(path) must be a 1-D numpy array equal to encode(text, allowed_special='all')"
                )
            done.append("encode_file")
            folder = save_tokenizer(tok, Path(tmp) / "tok")
            loaded = load_tokenizer(folder)
            if type(loaded) is not cls or loaded.encode(corpus[0]) != tok.encode(corpus[0]):
                raise _fail(what, "a saved folder does not load back (through its recorded kind) to the same tokenizer")
            if loaded.special_tokens != tok.special_tokens or loaded.vocab_size != tok.vocab_size:
                raise _fail(what, "special tokens or vocab_size change after save and load")
            done.append("save and load")
            facts = tok.describe()
            json.dumps(facts)
            if facts.get("kind") != name and facts.get("kind") != cls.name:
                raise _fail(what, f"describe() must name its kind, got {facts.get('kind')!r}")
            if cls.hf_export:
                written = Path(tok.save_hf(Path(tmp) / "hf"))
                if not written.is_file():
                    raise _fail(what, "hf_export is declared but save_hf() wrote no file")
                done.append("save_hf")
            empty = Path(tmp) / "empty"
            empty.mkdir()
            try:
                cls.load(empty)
            except TokenizerError:
                pass
            else:
                raise _fail(what, "load() of an empty folder must raise TokenizerError")
        try:
            cls.check_options({"no_such_option": 1})
        except ConfigError as exc:
            if "no_such_option" not in str(exc):
                raise _fail(what, f"the error for an unknown option does not name it: {exc}") from None
        else:
            raise _fail(what, "an unknown training option was accepted")
        done.append("bad input")
    return done


def check_trainer(
    trainer: str | type, data_dir: str | Path, *, config: Any = None, exact_resume: bool = True
) -> list[str]:
    """Check a trainer (registered name or ``Trainer`` subclass) on a prepared data folder.

    Stopping at a step, resuming to the end (with ``exact_resume``, to the very
    weights of an uninterrupted run), a run folder that ``load_run`` loads, the
    refusal to write over an existing run without ``overwrite``, and clear
    errors for an unknown option and missing data.
    """
    import torch

    from alilama_core import config as cfgmod
    from alilama_core.checkpoint import load_run
    from alilama_core.interfaces import Trainer
    from alilama_core.registry import get_trainer

    done: list[str] = []
    name, ctx = _name("trainer", trainer)
    with ctx:
        cls = get_trainer(name)
        what = f"trainer {name!r}"
        if not (isinstance(cls, type) and issubclass(cls, Trainer)):
            raise _fail(what, f"registered object {cls!r} is not a Trainer subclass")
        from alilama_core.data import TokenData

        vocab = TokenData(data_dir).meta["vocab_size"]
        cfg = config or cfgmod.preset("tiny")
        cfg = cfgmod.apply_overrides(
            cfg,
            [
                f"model.vocab_size={vocab}",
                "model.context_length=16",
                "train.max_steps=4",
                "train.batch_size=4",
                "train.warmup_steps=1",
                "train.eval_every=2",
                "train.eval_tokens=256",
                "train.checkpoint_every=2",
                "train.log_every=1",
                "train.sample_tokens=4",
                "train.sample_every=1000",
                "train.device=cpu",
                f"train.trainer={name}",
            ],
        ).validate()
        messages: list[str] = []
        with tempfile.TemporaryDirectory() as tmp:
            whole, part = Path(tmp) / "whole", Path(tmp) / "part"
            result = cls(cfg, echo=messages.append, show_progress=False).fit(str(data_dir), str(whole))
            if not isinstance(result, dict) or result.get("step") != 4:
                raise _fail(what, f"fit() must return a dict with step=4 (train.max_steps), got {result!r}")
            done.append("fit")
            stopped = cls(cfg, echo=messages.append, show_progress=False).fit(str(data_dir), str(part), stop_at=2)
            if stopped.get("step") != 2:
                raise _fail(what, f"fit(stop_at=2) must stop at step 2, got {stopped!r}")
            resumed = cls(cfgmod.load(part / "config.yaml"), echo=messages.append, show_progress=False).fit(
                str(data_dir), str(part), resume=True
            )
            if resumed.get("step") != 4:
                raise _fail(what, f"fit(resume=True) must continue to step 4, got {resumed!r}")
            a, b = load_run(whole, verify=False), load_run(part, verify=False)
            if exact_resume:
                for (k, va), vb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
                    if not torch.equal(va, vb):
                        raise _fail(
                            what, f"a run stopped at step 2 and resumed differs from an uninterrupted one ({k})"
                        )
            done.append("stop and resume")
            try:
                cls(cfg, echo=messages.append, show_progress=False).fit(str(data_dir), str(whole))
            except AlilamaError:
                pass
            else:
                raise _fail(what, "fit() into an existing run without overwrite or resume must raise AlilamaError")
            try:
                cls(cfg, echo=messages.append, show_progress=False).fit(
                    str(Path(tmp) / "no-data"), str(Path(tmp) / "r")
                )
            except AlilamaError:
                pass
            else:
                raise _fail(what, "fit() on a missing data folder must raise AlilamaError")
        bad = cfgmod.apply_overrides(cfg, ["train.trainer_options.no_such_option=1"])
        try:
            cls(bad, echo=messages.append, show_progress=False)
        except ConfigError as exc:
            if "no_such_option" not in str(exc):
                raise _fail(what, f"the error for an unknown option does not name it: {exc}") from None
        else:
            raise _fail(what, "an unknown key in train.trainer_options was accepted")
        done.append("bad input")
    return done


def check_task(task: str | type | Any, **options: Any) -> list[str]:
    """Check an algorithmic task (registered name, ``Task`` class or instance) against its contract.

    Symbols, seeded determinism, example sizes, options, scoring and the symbol
    tokenizer; see ``alilama_core.tasks.check_task``. Returns the checks run.
    """
    from alilama_core.tasks import check_task as run_checks

    return run_checks(task, **options)
