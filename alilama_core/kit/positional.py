"""The conformance kit for a positional plugin."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from alilama_core.base.errors import ConfigError
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine.cache import KVCache
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_positional
from alilama_core.engine.validate import check_model
from alilama_core.kit.attention import _with_backend
from alilama_core.kit.common import (
    KIT_CONTEXT,
    PROMPT_LENGTHS,
    Check,
    Subject,
    _check_twins,
    _cpu_backends,
    _fail,
    _padded_batch_error,
    _replace,
    _scope,
    _scoped,
    _twins,
    prompt_lengths,
    run_checks,
    tiny_model_config,
)
from alilama_core.runs.checkpoint import load_weights, save_weights


def check_positional_scheme(
    scheme: str | type,
    *,
    options: dict[str, Any] | None = None,
    backends: Sequence[str] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check a positional scheme (a registered name, or a ``PositionalScheme`` subclass) against its contract.

    Shapes and dtypes of its kind's method, a bias that agrees with itself under
    a cache offset and with ``slopes()``, positions per row (a bias that depends
    on ``q - k`` only, ``rotate``/``embed`` that give each row of a batch its own
    positions), cached against uncached logits, gradients that reach its
    parameters (and a bias that follows them, in a frozen model too: never
    stale), every available CPU backend against eager (forward and gradients), a
    left-padded batch of 64- and 200-token prompts (prefilled, then decoded with
    a KV cache) equal to each prompt alone on every backend that takes padding,
    save and load, and a clear error for an unknown option. Positions are probed
    up to 200, or to the scheme's ``max_positions``.
    Runs every check of ``positional_checks`` in order; returns the names of those run.
    """
    return run_checks(positional_checks(scheme, options=options, backends=backends, known_gaps=known_gaps))


def positional_checks(
    scheme: str | type,
    *,
    options: dict[str, Any] | None = None,
    backends: Sequence[str] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[Check]:
    """The named checks of ``check_positional_scheme``, one ``Check`` each (see ``parametrize_with_checks``)."""
    import torch

    name, scope = _scope("positional", scheme)
    what = f"positional scheme {name!r}"
    with scope():
        cls = get_positional(name)
        cls_kind = getattr(cls, "kind", None)
        config = tiny_model_config(positional=name, positional_options=dict(options or {}), context_length=KIT_CONTEXT)
        padded_on = (
            _cpu_backends(config, training=False, exact_only=True, padded=True) if backends is None else backends
        )
        padded_on = [config.attention, *(b for b in padded_on if b != config.attention)]
        if backends is None:
            backends = _cpu_backends(config, training=True, exact_only=True)
        trainable, limit = None, None
        if isinstance(cls, type) and issubclass(cls, PositionalScheme):
            try:
                built = cls(config)
                trainable = any(p.requires_grad for p in built.parameters())
                limit = built.max_positions
            except Exception:  # the checks that build it say what is wrong
                trainable = None
        lengths = prompt_lengths(limit)
        probe = PROMPT_LENGTHS[-1] if limit is None else min(PROMPT_LENGTHS[-1], limit)  # positions probed

    def build_model_once():
        check_model(config)
        torch.manual_seed(0)
        return build_model(config)

    subject = Subject(model=build_model_once, x=lambda: torch.randint(0, config.vocab_size, (2, 12)))
    H, C = config.n_heads, config.d_model

    def kind() -> None:
        if not (isinstance(cls, type) and issubclass(cls, PositionalScheme)):
            raise _fail(what, f"registered object {cls!r} is not a PositionalScheme subclass")
        if cls.kind not in ("bias", "rotary", "embedding", "none"):
            raise _fail(what, f"kind must be bias, rotary, embedding or none, not {cls.kind!r}")
        if not isinstance(subject.model.positional, cls):
            raise _fail(what, f"a model built with positional={name!r} does not use {cls.__name__}")

    def shapes() -> None:
        """The kind's own method: shapes and dtypes, and agreement under a cache offset."""
        pos = subject.model.positional
        with torch.no_grad():
            if cls.kind == "bias":
                full = pos.bias(torch.arange(probe), torch.arange(probe))
                if tuple(full.shape) != (H, probe, probe) or not full.is_floating_point():
                    raise _fail(
                        what,
                        f"bias(q_pos, k_pos) must be a float (H, T, S) = ({H}, {probe}, {probe}) tensor, "
                        f"got {tuple(full.shape)} {full.dtype}",
                    )
                for stop in sorted({min(9, probe), min(64, probe), probe}):  # the last 4 queries after a cache
                    q0 = max(stop - 4, 0)
                    part = pos.bias(torch.arange(q0, stop), torch.arange(stop))
                    if not torch.allclose(part, full[:, q0:stop, :stop], atol=1e-5, rtol=1e-5):
                        raise _fail(
                            what,
                            f"bias() for queries {q0}..{stop - 1} over keys 0..{stop - 1} differs from those rows of the "
                            f"full {probe}-position bias (cache offset): a bias must depend on the positions it is "
                            "given, not on how many queries or keys a call has",
                        )
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

    def cached() -> None:
        """Logits: shape, dtype, finite; a KV cache gives the same logits as a full pass."""
        model, x = subject.model, subject.x
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
            got = torch.cat(steps, dim=1)  # (2, 12, V)
            if not torch.allclose(got, logits, atol=1e-4, rtol=1e-4):
                raise _fail(what, f"cached and uncached logits differ (max {(got - logits).abs().max():.2e})")

    def per_row() -> None:
        """Each row of a batch is placed by its own positions (see ``PositionalScheme``)."""
        pos = subject.model.positional
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            if cls.kind == "bias":
                k_pos = torch.arange(probe)
                full = pos.bias(k_pos, k_pos).float()  # (H, N, N)
                distance = k_pos[:, None] - k_pos[None, :]  # (N, N)
                by_distance = full[:, :, 0][:, distance.clamp(min=0)]  # (H, N, N): bias(q - k, 0)
                wrong = ~torch.isclose(full, by_distance, atol=1e-5, rtol=1e-5) & (distance >= 0)
                if wrong.any():
                    h, i, j = (int(v) for v in wrong.nonzero()[0])
                    raise _fail(
                        what,
                        f"the bias depends on more than q - k: bias(q_pos={i}, k_pos={j}) = {float(full[h, i, j]):.4g} "
                        f"but bias({i - j}, 0) = {float(by_distance[h, i, j]):.4g} (head {h}). The model computes one "
                        "bias for the whole batch from its columns, and in a left-padded batch (generate with "
                        "several prompts, alilama serve) each row's positions are those columns shifted by its "
                        "padding, so only a bias that is a function of q - k is exact there. Make bias() a function "
                        "of q_pos - k_pos alone (no absolute position, no normalisation by the query's position or "
                        "the number of keys), or give absolute positions through a rotary or embedding scheme, "
                        "which receive each row's own positions",
                    )
                return
            T = min(7, probe)
            rows = torch.stack((torch.arange(T), torch.arange(probe - T, probe)))  # (2, T): rows that differ
            if cls.kind == "rotary":
                x = torch.randn(2, H, T, C // H, generator=generator)
                got = pos.rotate(x, rows)
                alone = torch.cat([pos.rotate(x[b : b + 1], rows[b]) for b in range(2)])
                method, fix = "rotate(x, positions)", "rotate row b of x by positions[b]"
            else:
                got = pos.embed(rows)
                alone = torch.stack([pos.embed(rows[b]) for b in range(2)])
                method, fix = "embed(positions)", "embed row b from positions[b]"
            if tuple(got.shape) != tuple(alone.shape) or not torch.allclose(got, alone, atol=1e-5, rtol=1e-5):
                raise _fail(
                    what,
                    f"{method} with (B, T) positions whose rows differ (0..{T - 1} and {probe - T}..{probe - 1}) "
                    "is not what each row gives alone with its (T,) positions. In a left-padded batch "
                    "(generate with several prompts, alilama serve) every row has its own positions: "
                    f"{fix}, never one row's positions for all",
                )

    def padded(backend: str) -> Callable[[], None]:
        def check() -> None:
            """A left-padded batch, prefilled and decoded with a KV cache, equals each prompt alone."""
            torch.manual_seed(0)
            model = build_model(_replace(config, attention=backend))
            if (where := _padded_batch_error(model, lengths=lengths)) is not None:
                advice = {
                    "bias": "its bias must be a function of q - k alone (see the check 'positions per row')",
                    "rotary": "rotate() must turn each row by its own (B, T) positions",
                    "embedding": "embed() must give each row the embeddings of its own (B, T) positions",
                }.get(cls.kind, "a scheme of kind 'none' must not depend on positions at all")
                raise _fail(
                    what,
                    f"under {backend!r}, a left-padded batch of prompts of {' and '.join(map(str, lengths))} tokens "
                    f"(key_padding_mask, per-row position_ids and a KV cache, as generate and alilama serve "
                    f"batch them) differs from each prompt alone: {where}; {advice}",
                )

        return check

    def gradients() -> None:
        """Gradients reach the scheme's parameters, and a trained bias is never stale."""
        model, x = subject.model, subject.x
        pos = model.positional
        model.train()
        for _ in range(2):  # two steps: a bias kept from the first graph would fail the second backward
            model.zero_grad()
            loss = model(x).float().logsumexp(-1).mean()
            loss.backward()
        for pname, p in pos.named_parameters():
            if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all() or not p.grad.abs().sum() > 0):
                raise _fail(what, f"no finite, non-zero gradient reaches parameter {pname!r}")
        model.zero_grad()
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

    def against(backend: str) -> Callable[[], None]:
        def check() -> None:
            """``backend`` computes what eager computes, forward and backward."""
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

        return check

    def save_and_load() -> None:
        """The weights (the scheme's parameters included) come back."""
        model, x = subject.model, subject.x
        with tempfile.TemporaryDirectory() as tmp:
            save_weights(model, tmp)
            fresh = build_model(config)
            load_weights(fresh, tmp)
            fresh.eval()
            model.eval()
            with torch.no_grad():
                if not torch.equal(fresh(x), model(x)):
                    raise _fail(what, "logits differ after save_weights and load_weights")

    def unknown_option() -> None:
        """An unknown option is a ConfigError naming it."""
        try:
            check_model(tiny_model_config(positional=name, positional_options={"no_such_option": 1}))
        except ConfigError as exc:
            if "no_such_option" not in str(exc):
                raise _fail(what, f"the error for an unknown option does not name it: {exc}") from None
        else:
            raise _fail(what, "an unknown key in model.positional_options was accepted")

    plan: list[tuple[str, Callable[[], None], str | None]] = [
        ("kind", kind, None),
        ("shapes", shapes, None),
        ("cached == uncached", cached, None),
        (
            "gradients reach parameters; bias follows them",
            gradients,
            "the scheme has no parameter that trains" if trainable is False else None,
        ),
        ("positions per row", per_row, "the scheme takes no positions" if cls_kind == "none" else None),
        *((f"{b} == eager", against(b), None) for b in backends if b != config.attention),
        *(
            (
                f"padded batch == alone ({b})",
                padded(b),
                None if lengths is not None else f"its {limit} positions leave no room for two prompts",
            )
            for b in padded_on
        ),
        ("save and load", save_and_load, None),
        ("unknown option refused", unknown_option, None),
    ]
    return [
        Check("positional", name, label, _scoped(scope, fn), skip=skip, gap=(known_gaps or {}).get(label))
        for label, fn, skip in plan
    ]
