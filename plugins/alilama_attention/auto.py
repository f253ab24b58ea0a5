"""``auto``: a router that picks, per shape class, the best registered backend for the case.

It knows no backend by name. For an ``AttentionCase`` (device, dtype, head
size, shape class ``decode``/``short``/``long``, the scheme's kind, padding,
training) it asks every registered backend, third-party ones included, whether
it ``refuses`` the case (its availability check, devices, dtypes, bias support,
padding, ``accepts``), and runs the eligible one with the highest declared
``priority`` for the case (ties: the name first in alphabetical order). The
model resolves it once per shape class; ``choose`` is what ``alilama model info``
shows. With the built-ins' priorities:

| case | choice |
|---|---|
| CPU, ALiBi, long inputs (S >= 1024), unpadded | ``tiled`` |
| CUDA, fp16/bf16, ALiBi, with flash-attn 2.4+ on an Ampere or newer GPU | ``flash`` |
| CUDA, ALiBi, long inputs, no flash-attn | ``flex`` (compiled FlexAttention) |
| everything else (decode steps, RoPE, learned, NoPE, padded) | ``sdpa`` |

A backend that declares ``exact=False`` (a sliding window, approximate
attention) is never chosen: ``auto`` computes exact attention, whatever is installed.
"""

from __future__ import annotations

from torch import Tensor

from alilama_core.contracts.attention import (
    AttentionBackend,
    AttentionBias,
    AttentionCase,
    attention_backend,
    shape_class,
)
from alilama_core.base.errors import PluginUnavailableError
from alilama_core.contracts.positional import PositionalScheme

_choices: dict[tuple, AttentionBackend] = {}


def candidates(case: AttentionCase) -> list[tuple[str, AttentionBackend | None, str | None]]:
    """Every registered backend as ``(name, backend or None, why it is refused or None)``."""
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    rows = []
    for name in sorted(reg.names("attention")):
        try:
            backend = attention_backend(reg.get("attention", name))
        except Exception as exc:  # a backend that cannot load is refused, never fatal
            rows.append((name, None, f"it failed to load: {exc}"))
            continue
        if not backend.exact:  # a router never trades exact attention for another computation
            rows.append((name, backend, "it is not exact attention (exact=False); name it in model.attention"))
            continue
        rows.append((name, backend, backend.refuses(case)))
    return rows


def choose(case: AttentionCase) -> AttentionBackend:
    """The eligible backend with the highest declared priority for ``case``."""
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    key = (case, id(reg), tuple(reg.names("attention")))  # a newly registered backend is considered
    if key in _choices:
        return _choices[key]
    rows = candidates(case)
    eligible = [(backend.rank(case), name, backend) for name, backend, reason in rows if reason is None]
    if not eligible:
        reasons = "; ".join(f"{name}: {reason}" for name, _, reason in rows)
        raise PluginUnavailableError(f"attention 'auto' found no backend for {case}: {reasons}")
    best = min(eligible, key=lambda row: (-row[0], row[1]))[2]
    _choices[key] = best
    return best


def case_of(
    q: Tensor, k: Tensor, positional: PositionalScheme | None, causal: bool, key_padding_mask: Tensor | None
) -> AttentionCase:
    """The ``AttentionCase`` of one direct call."""
    import torch

    grad = torch.is_grad_enabled()
    trainable = grad and positional is not None and any(p.requires_grad for p in positional.parameters())
    return AttentionCase(
        q.device.type,
        q.dtype,
        q.size(-1),
        shape_class(q.size(-2), k.size(-2)),
        positional.kind if positional is not None else "none",
        bool(positional is not None and positional.has_slopes),
        key_padding_mask is not None,
        grad and (q.requires_grad or k.requires_grad),
        trainable,
        causal,
    )


def auto_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    bias: AttentionBias | None = None,
) -> Tensor:
    """Called directly (not through a model): choose for this call's case, then run it."""
    chosen = choose(case_of(q, k, positional, causal, key_padding_mask))
    if chosen.shared_bias:
        return chosen.fn(q, k, v, positional=positional, causal=causal, key_padding_mask=key_padding_mask, bias=bias)
    return chosen.fn(q, k, v, positional=positional, causal=causal, key_padding_mask=key_padding_mask)


backend = AttentionBackend(
    "auto",
    auto_attention,
    bias="dense",
    description="chooses per shape class among all registered backends by declared capability and priority",
    shared_bias=True,
    resolve=choose,
)
