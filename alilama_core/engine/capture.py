"""Attention probabilities of every layer and head, for any positional scheme and backend.

Fast backends (``sdpa``, ``flex``, ``flash``, ``tiled``) never materialise the
attention matrix, so the probabilities cannot be read back from them. While
:func:`capture` runs, a forward hook on each layer's ``qkv`` projection takes
the very ``q`` and ``k`` the layer computes and, beside the model's own
backend (which still produces the output: the logits do not change by a
single bit), computes the probabilities on the eager path::

    softmax(q k^T / sqrt(D) + bias + causal mask + padding mask)

A rotary scheme's ``rotate()`` turns ``q`` and ``k`` with the forward pass's
positions, a bias scheme's ``bias()`` is added, an embedding scheme has
already added its positions to the input: every scheme, a plugin's included,
gets the probabilities its model uses, whatever the backend. Example::

    from alilama_core.engine.capture import capture

    result = capture(model, ids)          # ids: (B, T) token ids
    result.attentions[layer]              # (B, H, T, T), rows sum to 1
    result.logits                         # (B, T, V), as model(ids) returns
    result.lens()                         # (L, B, T, V) logits read after each block

The residual stream after each block (``hidden``) feeds the logit lens: the
final norm and the tied head applied to an intermediate layer's stream.

A backend that declares ``exact=False`` (a sliding window, approximate
attention) computes other probabilities than the eager path: its own
``probabilities`` function, when it declares one, gives them instead, and
without one :func:`recording` refuses it with an ``UnsupportedError`` naming
the backend rather than draw attention the model never computes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from alilama_core.base.errors import UnsupportedError
from alilama_core.engine import attention_math

__all__ = [
    "AttentionCapture",
    "attention_modules",
    "check_exact",
    "attention_probabilities",
    "capture",
    "recording",
]


def attention_probabilities(
    q: Tensor,
    k: Tensor,
    positional: Any = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """Eager attention probabilities ``(B, H, T, S)`` in float32 for ``q`` ``(B, H, T, D)``, ``k`` ``(B, H, S, D)``.

    ``positional`` is a bias scheme (its ``bias()`` is added) or ``None``. The
    queries are the last ``T`` of the ``S`` positions (a KV cache precedes
    them). A padded key gets probability 0; a padded query still sees itself,
    so every row sums to 1. The maths is ``attention_math``'s, the eager backend's.
    """
    t, s = q.size(-2), k.size(-2)
    bias = None
    if positional is not None and getattr(positional, "kind", None) == "bias":
        k_pos = torch.arange(s, device=q.device)  # (S,)
        bias = positional.bias(k_pos[s - t :], k_pos).float()[None]  # (1, H, T, S)
    keep = attention_math.keep_mask(t, s, q.device, causal, key_padding_mask)  # (B|1, 1, T, S) or None
    return attention_math.attention_weights(q.float(), k.float(), attention_math.additive_mask(bias, keep))


def check_exact(model: nn.Module) -> Any:
    """The function that gives ``model``'s attention probabilities (the eager path for an exact backend).

    A backend that declares ``exact=False`` must declare its own ``probabilities``;
    without them this raises ``UnsupportedError`` naming the backend.
    """

    backend = getattr(model, "backend", None)
    if backend is None or getattr(backend, "exact", True):
        return attention_probabilities
    if getattr(backend, "probabilities", None) is not None:
        own = backend.probabilities

        def probabilities(q, k, positional=None, causal=True, key_padding_mask=None):
            return own(q, k, positional=positional, causal=causal, key_padding_mask=key_padding_mask).float()

        return probabilities
    raise UnsupportedError(
        f"attention backend {backend.name!r} is not exact attention (it declares exact=False) and declares no "
        "probabilities: the model computes attention that the full causal softmax does not reproduce, so its "
        "attention cannot be captured or drawn. Attention maps need a run trained with an exact backend, or a "
        "backend that declares its probabilities"
    )


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The model's attention modules in layer order: those with a ``qkv`` projection and ``n_heads``."""
    return [m for m in model.modules() if isinstance(getattr(m, "qkv", None), nn.Module) and hasattr(m, "n_heads")]


def _split_heads(qkv: Tensor, n_heads: int) -> tuple[Tensor, Tensor]:
    B, T, C3 = qkv.shape
    q, k, _ = qkv.split(C3 // 3, dim=2)  # (B, T, C) each
    q = q.view(B, T, n_heads, -1).transpose(1, 2)  # (B, H, T, D)
    k = k.view(B, T, n_heads, -1).transpose(1, 2)  # (B, H, T, D)
    return q, k


@contextlib.contextmanager
def recording(
    model: nn.Module,
    positions: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
) -> Iterator[list[Tensor | None]]:
    """Within the block, a forward pass of ``model`` records each layer's probabilities.

    Yields a list with one entry per layer, ``(B, H, T, T)`` after a forward
    pass without a KV cache (the latest pass wins). ``positions`` and
    ``key_padding_mask`` must be those given to the forward pass (default:
    ``0 .. T-1``, no padding). Only forward hooks are added (on each layer's
    ``qkv`` projection), so the backend, and the logits, are untouched; the
    hooks are removed on exit.
    """
    modules = attention_modules(model)
    scheme = getattr(model, "positional", None)
    if not modules:
        raise TypeError(f"{type(model).__name__} has no attention modules with a 'qkv' projection")
    probabilities = check_exact(model)
    store: list[Tensor | None] = [None] * len(modules)

    def hook_for(index: int, module: nn.Module):
        def hook(_linear: nn.Module, _inputs: Any, out: Tensor) -> None:
            with torch.no_grad():
                q, k = _split_heads(out.detach(), module.n_heads)  # (B, H, T, D) each
                if getattr(scheme, "kind", None) == "rotary":
                    pos = positions if positions is not None else torch.arange(q.size(2), device=q.device)
                    q, k = scheme.rotate(q, pos), scheme.rotate(k, pos)
                bias = scheme if getattr(scheme, "kind", None) == "bias" else None
                store[index] = probabilities(q, k, bias, True, key_padding_mask)  # (B, H, T, T)

        return hook

    handles = [m.qkv.register_forward_hook(hook_for(i, m)) for i, m in enumerate(modules)]
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


@dataclass
class AttentionCapture:
    """What one captured forward pass saw.

    ``attentions``: one ``(B, H, T, S)`` float32 tensor per layer, rows summing to 1;
    ``logits``: ``(B, T, V)``, exactly what the model returns without capture;
    ``hidden``: the residual stream ``(B, T, C)`` after each block.
    """

    attentions: list[Tensor]
    logits: Tensor
    hidden: list[Tensor] = field(default_factory=list)
    model: nn.Module | None = field(default=None, repr=False)

    def stacked(self) -> Tensor:
        """All layers at once: ``(L, B, H, T, S)``."""
        return torch.stack(self.attentions)

    def lens(self) -> Tensor:
        """Logit lens ``(L, B, T, V)``: the final norm and head applied after each block."""
        if self.model is None or not self.hidden:
            raise ValueError("this capture kept no residual stream (capture(..., hidden=True))")
        with torch.no_grad():
            return torch.stack([self.model.head(self.model.ln_f(h)) for h in self.hidden]).float()

    def mean_distance(self) -> Tensor:
        """Mean distance ``(L, H)`` from each query to the keys it reads, averaged over queries and batch."""
        att = self.stacked()  # (L, B, H, T, S)
        t, s = att.shape[-2:]
        k_pos = torch.arange(s, dtype=torch.float32, device=att.device)
        dist = (k_pos[s - t :, None] - k_pos[None, :]).clamp(min=0)  # (T, S)
        return (att * dist).sum(-1).mean(dim=(1, 3))  # (L, H)


def capture(
    model: nn.Module,
    idx: Tensor,
    key_padding_mask: Tensor | None = None,
    position_ids: Tensor | None = None,
    hidden: bool = True,
) -> AttentionCapture:
    """Run ``model`` once on ``idx`` ``(B, T)`` and return every layer's attention probabilities.

    Works for any positional scheme and attention backend: probabilities come
    from the eager path (see the module docstring), the logits from the
    model's own backend. ``key_padding_mask`` ``(B, T)`` and ``position_ids``
    ``(B, T)`` are passed to the model as in ``GPT.forward``. ``hidden`` also
    keeps the residual stream after each block (for the logit lens). No
    gradients are recorded.
    """
    streams: list[Tensor] = []
    handles = []
    if hidden and hasattr(model, "blocks"):
        for block in model.blocks:
            handles.append(block.register_forward_hook(lambda _m, _i, out: streams.append(out.detach())))
    kwargs: dict[str, Any] = {}
    if key_padding_mask is not None:
        kwargs["key_padding_mask"] = key_padding_mask
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    try:
        with torch.no_grad(), recording(model, position_ids, key_padding_mask) as store:
            logits = model(idx, **kwargs)
    finally:
        for h in handles:
            h.remove()
    if any(p is None for p in store):
        raise RuntimeError("a layer's qkv projection did not run during the forward pass")
    return AttentionCapture([p for p in store if p is not None], logits, streams, model)
