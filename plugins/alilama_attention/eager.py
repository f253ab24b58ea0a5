"""The reference backend: ``softmax(Q K^T / sqrt(D) + bias + causal mask) V``, spelt out."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from alilama_core.interfaces import AttentionBackend, PositionalScheme
from alilama_attention.masks import dense_mask, padding_mask


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    t, s = q.size(-2), k.size(-2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, S)
    mask = dense_mask(positional, t, s, causal, q.device, scores.dtype)
    if mask is not None:
        scores = scores + mask
    if key_padding_mask is not None:
        scores = scores + padding_mask(key_padding_mask, scores.dtype)
    weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)  # (B, H, T, S)
    return weights @ v  # (B, H, T, D)


backend = AttentionBackend(
    "eager", eager_attention, bias="dense", description="explicit softmax attention (reference)"
)
