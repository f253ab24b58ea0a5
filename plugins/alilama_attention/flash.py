"""flash-attn's ``flash_attn_func`` with ``causal=True`` and ALiBi ``alibi_slopes``.

Needs CUDA, the ``flash-attn`` package, and fp16/bf16 inputs (fp32 inputs are
run in bf16 and cast back). Bias schemes other than slope-shaped ones cannot be
expressed, so only ``has_slopes`` schemes are accepted.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from alilama_core.errors import PluginUnavailableError
from alilama_core.interfaces import AttentionBackend, PositionalScheme


@functools.cache
def _check() -> str | None:
    """Why the backend cannot run here, or ``None``; depends only on the installation, so cached."""
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return "flash-attn is not installed (pip install flash-attn; it needs a CUDA GPU)"
    if not torch.cuda.is_available():
        return "no CUDA device is available"
    return None


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    reason = _check()
    if reason is not None:
        raise PluginUnavailableError(f"attention 'flash' cannot run here: {reason}")
    if key_padding_mask is not None:
        raise PluginUnavailableError(
            "attention 'flash' does not take padding masks; use model.attention=sdpa for padded batches"
        )
    from flash_attn import flash_attn_func

    dtype = q.dtype if q.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    slopes = positional.slopes().to(q.device, torch.float32) if positional is not None else None
    # flash-attn takes (B, T, H, D); for T < S it aligns queries to the last keys, as a KV cache needs.
    out = flash_attn_func(
        q.transpose(1, 2).to(dtype),
        k.transpose(1, 2).to(dtype),
        v.transpose(1, 2).to(dtype),
        causal=causal,
        alibi_slopes=slopes,
    )
    return out.transpose(1, 2).to(q.dtype)  # (B, H, T, D)


backend = AttentionBackend(
    "flash",
    flash_attention,
    bias="slopes",
    trains_on=("cuda",),
    check=_check,
    description="flash-attn 2 with ALiBi slopes (CUDA, fp16/bf16)",
)
