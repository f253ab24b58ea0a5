"""``torch.nn.functional.scaled_dot_product_attention``.

Without a bias the causal case uses ``is_causal=True``. With a bias, the causal
mask is folded into one 4-D float mask ``(1, H, T, S)``: PyTorch refuses a float
mask together with ``is_causal``, and on CPU a 3-D mask falls back to the slow
math kernel while a 4-D one runs the fused kernel.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from alilama_core.interfaces import AttentionBackend, PositionalScheme
from alilama_attention.masks import dense_mask, padding_mask


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    t, s = q.size(-2), k.size(-2)
    if positional is None and key_padding_mask is None:
        if not causal or t == 1:  # one query sees every cached key
            return F.scaled_dot_product_attention(q, k, v)
        if t == s:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    mask = dense_mask(positional, t, s, causal, q.device, q.dtype)
    if key_padding_mask is not None:
        pad = padding_mask(key_padding_mask, q.dtype)
        mask = pad if mask is None else mask + pad  # (B, H or 1, T, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


backend = AttentionBackend(
    "sdpa", sdpa_attention, bias="dense", description="PyTorch scaled_dot_product_attention"
)
