"""Eager attention, once: ``softmax(Q K^T / sqrt(D) + bias + mask) V``.

The one copy of the maths that the ``eager`` backend (``alilama_attention.eager``),
attention capture (``alilama_core.engine.capture``) and the Hugging Face export's
remote code (``modeling_alilama.py``) all run. The export copies this file,
verbatim, beside the exported weights, so it imports only torch and the
standard library (never Alilama).

Scores are scaled, biased, masked and normalised in float32 whatever the
activation dtype. ``keep_mask`` says which keys a query sees (causal order, key
padding; a padded query still sees itself, so no row is ever fully masked);
``additive_mask`` turns that and a positional bias into the one additive mask
the scores take::

    keep = keep_mask(t, s, q.device, causal=True, key_padding_mask=pad)  # (B|1, 1, T, S)
    mask = additive_mask(bias, keep)                                     # (B|1, H|1, T, S)
    out, weights = eager_attention(q, k, v, mask)                        # (B, H, T, D), (B, H, T, S)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["additive_mask", "attention_weights", "eager_attention", "keep_mask"]


def keep_mask(
    t: int,
    s: int,
    device=None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor | None:
    """Boolean ``(B|1, 1, T, S)``: ``True`` where a query may see a key; ``None``: every key.

    The ``t`` queries are the last of the ``s`` positions (a KV cache precedes
    them). ``key_padding_mask`` ``(B, S)`` is ``True`` on real keys; a padded
    query still sees its own key.
    """
    if not causal and key_padding_mask is None:
        return None
    k_pos = torch.arange(s, device=device)  # (S,)
    q_pos = k_pos[s - t :]  # (T,)
    keep = torch.ones(t, s, dtype=torch.bool, device=device)[None, None]  # (1, 1, T, S)
    if causal:
        keep = keep & (k_pos[None, :] <= q_pos[:, None])[None, None]
    if key_padding_mask is not None:
        own = (k_pos[None, :] == q_pos[:, None])[None, None]  # (1, 1, T, S): each query's own key
        keep = keep & (key_padding_mask.bool()[:, None, None, :] | own)  # (B, 1, T, S)
    return keep


def additive_mask(bias: Tensor | None, keep: Tensor | None, dtype: torch.dtype = torch.float32) -> Tensor | None:
    """``bias`` (broadcastable to ``(B, H, T, S)``, or ``None``) where ``keep``, ``-inf`` elsewhere, in ``dtype``."""
    if bias is None and keep is None:
        return None
    if bias is None:
        return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, float("-inf"))
    mask = bias.to(dtype)
    if keep is not None:
        mask = mask.masked_fill(~keep, float("-inf"))
    return mask


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Float32 probabilities ``softmax(q k^T * scale + mask)`` ``(B, H, T, S)``.

    ``q`` ``(B, H, T, D)``, ``k`` ``(B, H, S, D)``; ``scale`` defaults to
    ``1 / sqrt(D)``; ``mask`` is additive (``-inf`` or a very negative value
    hides a key).
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)).float() * scale  # (B, H, T, S)
    if mask is not None:
        scores = scores + mask.float()
    return torch.softmax(scores, dim=-1)  # (B, H, T, S)


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(weights @ v, weights)``: ``(B, H, T, D)`` and the ``(B, H, T, S)`` weights in ``v``'s dtype."""
    weights = attention_weights(q, k, mask, scale).to(v.dtype)  # (B, H, T, S)
    if dropout and training:
        weights = F.dropout(weights, p=dropout, training=True)
    return weights @ v, weights  # (B, H, T, D)
