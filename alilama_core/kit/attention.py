"""The conformance kit for an attention backend."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from alilama_core.contracts.attention import AttentionBackend, attention_backend
from alilama_core.engine.cache import KVCache
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_attention, get_positional
from alilama_core.kit.common import (
    KIT_CONTEXT,
    Check,
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


def _with_backend(model, config, backend: str):

    other = build_model(_replace(config, attention=backend))
    other.load_state_dict(model.state_dict())
    return other


def check_attention_backend(
    backend: str | AttentionBackend,
    *,
    schemes: Sequence[str] = ("alibi", "rope", "learned", "nope"),
    options: dict[str, Any] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check a registered attention backend against eager on every scheme it supports (CPU, float32).

    Forward logits and gradients of a tiny model, a KV cache (prompt then single
    tokens), and, when it declares ``padding``, a left-padded batch of 64- and
    200-token prompts (prefilled, then decoded with a KV cache) that must give
    each prompt what eager gives it alone; a backend
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
    checks = attention_checks(backend, schemes=schemes, options=options, known_gaps=known_gaps)
    done = run_checks(checks)
    if not done:  # unavailable here, a GPU-only kernel, or one that refuses these head sizes on the CPU
        reasons = {c.skip for c in checks}
        reason = reasons.pop() if len(reasons) == 1 else f"it runs none of {', '.join(schemes)} on this machine's CPU"
        return [f"skipped: {reason}"]
    return done


def attention_checks(
    backend: str | AttentionBackend,
    *,
    schemes: Sequence[str] = ("alibi", "rope", "learned", "nope"),
    options: dict[str, Any] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[Check]:
    """The named checks of ``check_attention_backend``: one ``Check`` per positional scheme."""
    import torch

    name, scope = _scope("attention", backend)
    what = f"attention backend {name!r}"
    with scope():
        obj = get_attention(name)
        if not isinstance(obj, AttentionBackend):
            raise _fail(what, f"registered object {obj!r} is not an AttentionBackend")
        info = attention_backend(obj)
        unavailable = info.available()
        runs = {}
        for scheme in schemes:
            config = tiny_model_config(positional=scheme, context_length=KIT_CONTEXT)
            if unavailable is not None:
                runs[scheme] = (config, unavailable)
            elif not info.supports(get_positional(scheme)) or (
                info.resolve is None and name not in _cpu_backends(config, training=True)
            ):
                runs[scheme] = (config, f"it does not run {scheme} on this machine's CPU")
            else:
                runs[scheme] = (config, None)

    def exact(scheme: str, config) -> Callable[[], None]:
        def check() -> None:
            """Logits, gradients, KV-cache decoding (and a left-padded batch) against eager."""
            ref, other = _twins(config, name, options)
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
            lengths = prompt_lengths(ref.positional.max_positions)
            if info.padding and lengths is not None:
                if (where := _padded_batch_error(other, reference=ref, lengths=lengths)) is not None:
                    raise _fail(
                        what,
                        f"with {scheme!r}, a left-padded batch (key_padding_mask, per-row position_ids, a KV cache) "
                        f"differs from eager on each prompt alone: {where}; padded keys (key_padding_mask False) "
                        "must be hidden from every query of their row, and nothing else",
                    )

        return check

    def inexact(config) -> Callable[[], None]:
        return lambda: _check_inexact(what, config, name, options, info.padding)

    if runs:  # the model's architecture settings around the backend, with one scheme it takes
        scheme = next((s for s, (_, skip) in runs.items() if skip is None), next(iter(runs)))
        config, skip = runs[scheme]
        runs[f"{scheme} with {ARCHITECTURE_LABEL}"] = (_replace(config, **ARCHITECTURE_OPTIONS), skip)

    checks = []
    for scheme, (config, skip) in runs.items():
        if info.exact:
            label, fn = f"{scheme} == eager", exact(scheme, config)
        else:
            label = f"{scheme}: causal, cached == uncached, padding hidden (not compared with eager: exact=False)"
            fn = inexact(config)
        checks.append(Check("attention", name, label, _scoped(scope, fn), skip=skip, gap=(known_gaps or {}).get(label)))
    return checks


ARCHITECTURE_OPTIONS = {"qk_norm": True, "activation": "relu2", "tie_embeddings": False}
"""The model settings that are not the essay's (``ModelConfig``), checked together around every backend."""
ARCHITECTURE_LABEL = "qk_norm, relu2, untied head"


def _check_inexact(what: str, config, backend: str, options: dict[str, Any] | None, padding: bool) -> None:
    """A backend that declares ``exact=False``, against itself (see ``check_attention_backend``)."""
    import torch

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
