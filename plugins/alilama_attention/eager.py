"""The reference backend: ``softmax(Q K^T / sqrt(D) + bias + causal mask) V``, spelt out.

Scores, bias and masks are added and normalised in float32 whatever the
activation dtype, so fp16 and bf16 models match the fp32 reference within their
rounding; a padded query still sees itself, so no row is ever fully masked.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from alilama_core.interfaces import AttentionBackend, AttentionBias, PositionalScheme
from alilama_attention.masks import attention_bias


def eager_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    bias: AttentionBias | None = None,
) -> Tensor:
    context = attention_bias(bias, positional, q, k, key_padding_mask, causal)
    scores = (q @ k.transpose(-2, -1)).float() * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, S)
    mask = context.mask(torch.float32)  # (B or 1, H or 1, T, S)
    if mask is not None:
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1).to(v.dtype)  # (B, H, T, S)
    return weights @ v  # (B, H, T, D)


backend = AttentionBackend(
    "eager",
    eager_attention,
    bias="dense",
    description="explicit softmax attention in float32 (reference)",
    priority={"decode": 10, "short": 10, "long": 5},
    shared_bias=True,
)
