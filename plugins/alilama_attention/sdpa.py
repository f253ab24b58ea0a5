"""``torch.nn.functional.scaled_dot_product_attention``.

Without a bias or padding the causal case uses ``is_causal=True``. Otherwise the
bias, the causal mask and the padding mask are folded into one 4-D additive mask
``(B or 1, H or 1, T, S)``, built once per forward pass and shared by all layers
(PyTorch refuses a float mask together with ``is_causal``, and on CPU a 3-D mask
falls back to the slow math kernel while a 4-D one runs the fused kernel). The
kernel needs the mask in the activation dtype: in fp16/bf16 the bias is rounded
to that dtype (an ALiBi bias ``m * d`` to about ``m * d / 256`` in bf16).

PyTorch's fused kernels give a mask no gradient, so a learnable bias (a scheme
with parameters that require grad) would run the unfused math kernel; on the
CPU in float32 ``bias_grad.LearnableMaskAttention`` keeps the fused kernel and
computes the bias gradient natively.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from alilama_attention import bias_grad
from alilama_attention.masks import attention_bias
from alilama_core.contracts.attention import AttentionBackend, AttentionBias, human_bytes
from alilama_core.contracts.positional import PositionalScheme


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    bias: AttentionBias | None = None,
) -> Tensor:
    t, s = q.size(-2), k.size(-2)
    if (positional is None or positional.kind != "bias") and key_padding_mask is None:
        if not causal or t == 1:  # one query sees every cached key
            return F.scaled_dot_product_attention(q, k, v)
        if t == s:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    mask = attention_bias(bias, positional, q, k, key_padding_mask, causal).mask(q.dtype)
    if mask.requires_grad and bias_grad.supported(q, k, v, mask):  # a learnable bias, on the CPU
        return bias_grad.LearnableMaskAttention.apply(q, k, v, mask, causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _memory(heads: int, t: int) -> str:
    dense = heads * t * t * 4
    return (
        f"{human_bytes(dense)} dense (1, {heads}, {t}, {t}) float32 mask at T={t}, built once per "
        f"forward pass and shared by all layers; it grows as T^2 ({human_bytes(dense * 64)} at T={8 * t})"
    )


backend = AttentionBackend(
    "sdpa",
    sdpa_attention,
    bias="dense",
    description="PyTorch scaled_dot_product_attention",
    priority={"decode": 50, "short": 50, "long": 40},
    shared_bias=True,
    memory=_memory,
)
