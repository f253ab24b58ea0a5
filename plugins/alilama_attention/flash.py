"""flash-attn 2 with ALiBi ``alibi_slopes``: dense batches, left-padded batches (varlen), KV caches.

Needs a CUDA GPU of the Ampere generation or newer (compute capability 8.0+),
the ``flash-attn`` package at version 2.4 or later (the first with
``alibi_slopes``), and fp16/bf16 inputs: fp32 inputs are run in bf16 and cast
back (``auto`` never sends an fp32 model here). Only slope-shaped biases can be
expressed. Queries are aligned to the last keys (bottom-right), as a KV cache
needs; left-padded batches go through ``flash_attn_varlen_func`` with each
row's real tokens. flash-attn applies ALiBi as ``-m * |i - j|`` when not
causal, not the signed ``-m * (i - j)`` of the reference, so non-causal
attention with a bias is refused.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from alilama_attention.masks import attention_bias
from alilama_core.contracts.attention import AttentionBackend, AttentionBias, AttentionCase
from alilama_core.base.errors import PluginUnavailableError
from alilama_core.contracts.positional import PositionalScheme

MIN_VERSION = (2, 4)
MIN_CAPABILITY = (8, 0)


def refusal(version: str | None, cuda: bool, capability: tuple[int, int] | None) -> str | None:
    """Why flash-attn cannot run given its version, CUDA and the GPU's compute capability."""
    if version is None:
        return "flash-attn is not installed (pip install flash-attn; it needs a CUDA GPU)"
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < MIN_VERSION:
        return f"flash-attn {version} is too old: ALiBi slopes need flash-attn 2.4 or later"
    if not cuda:
        return "no CUDA device is available"
    if capability is not None and tuple(capability) < MIN_CAPABILITY:
        return f"the GPU's compute capability {capability[0]}.{capability[1]} is below 8.0 (flash-attn 2 needs Ampere or newer)"
    return None


@functools.cache
def _check() -> str | None:
    """Why the backend cannot run here, or ``None``; depends only on the installation, so cached."""
    try:
        import flash_attn
    except ImportError:
        return refusal(None, False, None)
    cuda = torch.cuda.is_available()
    capability = torch.cuda.get_device_capability() if cuda else None
    return refusal(getattr(flash_attn, "__version__", "0.0"), cuda, capability)


def _unpad(x: Tensor, keep: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """``(B, H, L, D)`` with ``(B, L)`` keep-mask to packed ``(N, H, D)``, indices, cu_seqlens, max length."""
    lengths = keep.sum(dim=1, dtype=torch.int32)  # (B,)
    index = keep.flatten().nonzero().squeeze(1)  # (N,)
    packed = x.transpose(1, 2).flatten(0, 1)[index]  # (N, H, D)
    cu = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))  # (B + 1,)
    return packed, index, cu, int(lengths.max())


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    bias: AttentionBias | None = None,
) -> Tensor:
    reason = _check()
    if reason is not None:
        raise PluginUnavailableError(f"attention 'flash' cannot run here: {reason}")
    context = attention_bias(bias, positional, q, k, key_padding_mask, causal)
    slopes = context.slopes
    if context.scheme is not None and slopes is None:
        raise PluginUnavailableError("attention 'flash' takes slope-shaped biases only; use sdpa or eager")
    if slopes is not None and not causal:
        raise PluginUnavailableError(
            "attention 'flash' applies ALiBi symmetrically when not causal; use sdpa or eager for non-causal attention"
        )
    from flash_attn import flash_attn_func, flash_attn_varlen_func

    dtype = q.dtype if q.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    B, H, T, D = q.shape
    if key_padding_mask is None:
        # flash-attn takes (B, T, H, D); for T < S it aligns queries to the last keys.
        out = flash_attn_func(
            q.transpose(1, 2).to(dtype),
            k.transpose(1, 2).to(dtype),
            v.transpose(1, 2).to(dtype),
            causal=causal,
            alibi_slopes=slopes,
        )
        return out.transpose(1, 2).to(q.dtype)  # (B, H, T, D)
    # Left padding: each row's real tokens, packed; a padded query gets zeros (no key of its own row).
    q_keep = key_padding_mask[:, -T:]  # (B, T)
    qp, q_index, cu_q, max_q = _unpad(q.to(dtype), q_keep)
    kp, _, cu_k, max_k = _unpad(k.to(dtype), key_padding_mask)
    vp, _, _, _ = _unpad(v.to(dtype), key_padding_mask)
    packed = flash_attn_varlen_func(
        qp, kp, vp, cu_q, cu_k, max_q, max_k, causal=causal, alibi_slopes=slopes
    )  # (N, H, D)
    out = q.new_zeros(B * T, H, D, dtype=dtype)
    out[q_index] = packed
    return out.view(B, T, H, D).transpose(1, 2).to(q.dtype)  # (B, H, T, D)


def _accepts(case: AttentionCase) -> str | None:
    if case.kind == "bias" and not case.causal:
        return "it applies ALiBi symmetrically when not causal"
    if case.bias_trainable:
        return "its kernel gives trainable slopes no gradient"
    if case.head_dim > 256 or case.head_dim % 8:
        return f"it takes head sizes that are multiples of 8 up to 256, not {case.head_dim}"
    return None


def _memory(heads: int, t: int) -> str:
    return f"{heads * 4} bytes of slopes (the bias is applied in the kernel)"


backend = AttentionBackend(
    "flash",
    flash_attention,
    bias="slopes",
    trains_on=("cuda",),
    check=_check,
    description="flash-attn 2 with ALiBi slopes (CUDA, Ampere+, fp16/bf16; varlen for padded batches)",
    devices=("cuda",),
    dtypes=(torch.float16, torch.bfloat16),
    accepts=_accepts,
    priority={"cuda:short": 90, "cuda:long": 90, "cuda:decode": 60},
    shared_bias=True,
    memory=_memory,
)
