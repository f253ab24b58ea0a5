"""The reference backend: ``softmax(Q K^T / sqrt(D) + bias + causal mask) V``, spelt out.

The maths is ``alilama_core.engine.attention_math.eager_attention``, the one copy
that attention capture and the Hugging Face export's remote code also run.
Scores, bias and masks are added and normalised in float32 whatever the
activation dtype, so fp16 and bf16 models match the fp32 reference within their
rounding; a padded query still sees itself, so no row is ever fully masked.
"""

from __future__ import annotations

import torch
from torch import Tensor

from alilama_attention.masks import attention_bias
from alilama_core.contracts.attention import AttentionBackend, AttentionBias
from alilama_core.contracts.positional import PositionalScheme
from alilama_core.engine import attention_math


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
    mask = context.mask(torch.float32)  # (B or 1, H or 1, T, S): bias, -inf where hidden
    return attention_math.eager_attention(q, k, v, mask)[0]  # (B, H, T, D)


backend = AttentionBackend(
    "eager",
    eager_attention,
    bias="dense",
    description="explicit softmax attention in float32 (reference)",
    priority={"decode": 10, "short": 10, "long": 5},
    shared_bias=True,
)
