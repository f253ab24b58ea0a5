"""ALiBi at the cost of causal attention on CPU: query blocks over SDPA's fused kernel.

A 4-D float mask makes SDPA's fused CPU kernel compute the whole ``T x S``
score matrix (it cannot skip the masked upper triangle) and the mask itself
takes ``H x T x S`` floats. Here the queries are cut into blocks of ``Q``
rows; a block at absolute positions ``p0 .. p0+Q-1`` sees

- the keys before ``p0``, all visible: the ALiBi bias there is
  ``-m_h (p0 + a - j)``, which for a softmax row ``a`` equals ``m_h (j - p0)``
  up to a per-row constant. That depends on the key only, so it is passed as a
  broadcast ``(1, H, 1, p0)`` mask: no ``T x S`` tensor exists;
- the ``Q`` keys on the diagonal, with a small cached ``(1, H, Q, Q)`` causal
  mask carrying the same per-row shift;

and never the keys after it. The two parts come back from the fused kernel
with their log-sum-exp and are merged exactly (as flash attention merges
tiles). The backward pass reruns the fused backward kernel per tile with the
merged output and log-sum-exp, which is exact for any tiling, and cuts the
visible keys into chunks so no gradient buffer larger than a chunk is made.

Every row's log-sum-exp carries the same shift in every tile, so the merge and
the gradients are those of the exact ALiBi attention (tested against ``eager``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from alilama_attention.masks import attention_bias
from alilama_core.contracts.attention import AttentionBackend, AttentionBias, AttentionCase
from alilama_core.contracts.positional import PositionalScheme

QUERY_BLOCK = 128
KEY_CHUNK = 256

_fwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_bwd = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def _check() -> str | None:
    if _fwd is None or _bwd is None:
        return f"torch {torch.__version__} lacks the fused CPU attention kernels this backend calls"
    return None


def _diagonal_mask(slopes: Tensor, n: int, cache: dict) -> Tensor:
    """``(1, H, n, n)``: ``m_h * b`` for key ``b <= a``, ``-inf`` above the diagonal."""
    key = (n, slopes.device)
    if key not in cache:
        b = torch.arange(n, device=slopes.device)
        bias = slopes[:, None, None] * b.float()[None, None, :]  # (H, 1, n)
        mask = bias.expand(-1, n, -1).masked_fill(b[None, :, None] < b[None, None, :], float("-inf"))
        cache[key] = mask[None].contiguous()  # (1, H, n, n)
    return cache[key]


def _key_bias(slopes: Tensor, p0: int, start: int, stop: int, rows: int) -> Tensor:
    """Broadcast ``(1, H, rows, stop - start)`` view of ``m_h * (j - p0)`` for keys ``start..stop-1``."""
    j = torch.arange(start - p0, stop - p0, device=slopes.device, dtype=torch.float32)
    return (slopes[:, None] * j[None, :])[None, :, None, :].expand(1, -1, rows, -1)


def _merge(o1: Tensor, l1: Tensor, o2: Tensor, l2: Tensor) -> tuple[Tensor, Tensor]:
    lse = torch.logaddexp(l1, l2)  # (B, H, n)
    w1 = torch.exp(l1 - lse).unsqueeze(-1).to(o1.dtype)
    w2 = torch.exp(l2 - lse).unsqueeze(-1).to(o2.dtype)
    return o1 * w1 + o2 * w2, lse


class _TiledALiBi(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, block: int, diag_cache: dict):
        B, H, T, D = q.shape
        S = k.size(2)
        offset, scale = S - T, 1.0 / math.sqrt(D)
        out = torch.empty_like(q)
        lse = torch.empty(B, H, T, device=q.device, dtype=torch.float32)
        for q0 in range(0, T, block):
            n = min(block, T - q0)
            p0 = offset + q0  # absolute position of the block's first query
            qb = q[:, :, q0 : q0 + n]
            ob, lb = _fwd(
                qb,
                k[:, :, p0 : p0 + n],
                v[:, :, p0 : p0 + n],
                0.0,
                False,
                attn_mask=_diagonal_mask(slopes, n, diag_cache),
                scale=scale,
            )
            if p0 > 0:
                oa, la = _fwd(
                    qb,
                    k[:, :, :p0],
                    v[:, :, :p0],
                    0.0,
                    False,
                    attn_mask=_key_bias(slopes, p0, 0, p0, n),
                    scale=scale,
                )
                ob, lb = _merge(oa, la, ob, lb)
            out[:, :, q0 : q0 + n] = ob
            lse[:, :, q0 : q0 + n] = lb
        ctx.save_for_backward(q, k, v, out, lse, slopes)
        ctx.block, ctx.scale, ctx.diag_cache = block, scale, diag_cache
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse, slopes = ctx.saved_tensors
        block, scale = ctx.block, ctx.scale
        T, S = q.size(2), k.size(2)
        offset = S - T
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for q0 in range(0, T, block):
            n = min(block, T - q0)
            p0 = offset + q0
            rows = slice(q0, q0 + n)
            args = (grad_out[:, :, rows], q[:, :, rows])
            tail = (out[:, :, rows], lse[:, :, rows], 0.0, False)
            diag = slice(p0, p0 + n)
            gq, gk, gv = _bwd(
                *args,
                k[:, :, diag],
                v[:, :, diag],
                *tail,
                attn_mask=_diagonal_mask(slopes, n, ctx.diag_cache),
                scale=scale,
            )
            dq[:, :, rows] += gq
            dk[:, :, diag] += gk
            dv[:, :, diag] += gv
            for start in range(0, p0, KEY_CHUNK):
                stop = min(start + KEY_CHUNK, p0)
                keys = slice(start, stop)
                gq, gk, gv = _bwd(
                    *args,
                    k[:, :, keys],
                    v[:, :, keys],
                    *tail,
                    attn_mask=_key_bias(slopes, p0, start, stop, n),
                    scale=scale,
                )
                dq[:, :, rows] += gq
                dk[:, :, keys] += gk
                dv[:, :, keys] += gv
        return dq, dk, dv, None, None, None


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    positional: PositionalScheme | None = None,
    causal: bool = True,
    key_padding_mask: Tensor | None = None,
    bias: AttentionBias | None = None,
) -> Tensor:
    """ALiBi-shaped bias with causal masking by query blocks; anything else goes to ``sdpa``."""
    from alilama_attention.sdpa import sdpa_attention

    context = attention_bias(bias, positional, q, k, key_padding_mask, causal)
    slopes = context.slopes
    usable = (
        slopes is not None
        and causal
        and key_padding_mask is None
        and q.device.type == "cpu"
        and _fwd is not None
        and not (slopes.requires_grad and torch.is_grad_enabled())  # the kernel gives slopes no gradient
    )
    if not usable:
        return sdpa_attention(
            q, k, v, positional=positional, causal=causal, key_padding_mask=key_padding_mask, bias=context
        )
    # The diagonal masks are kept between passes as the bias is (for the scheme's current values), else per pass.
    cache = context.kept("tiled-diagonal")
    return _TiledALiBi.apply(q, k, v, slopes.detach(), QUERY_BLOCK, cache)


def _accepts(case: AttentionCase) -> str | None:
    if case.kind != "bias" or not case.has_slopes:
        return "it speeds up slope-shaped biases only (others run through sdpa)"
    if case.bias_trainable:
        return "its kernel gives trainable slopes no gradient"
    if not case.causal:
        return "it is causal only"
    return None


def _memory(heads: int, t: int) -> str:
    q = min(QUERY_BLOCK, t)
    return (
        f"{heads * q * q * 4 / 1024:.1f} KiB diagonal mask (1, {heads}, {q}, {q}) plus a per-block key bias of "
        f"{heads} x S floats; no T x S bias at any length"
    )


backend = AttentionBackend(
    "tiled",
    tiled_attention,
    bias="dense",
    check=_check,
    description="CPU: ALiBi by query blocks over SDPA's fused kernel; no T x S bias, masked half skipped",
    devices=("cpu",),
    padding=False,
    accepts=_accepts,
    priority={"cpu:long": 80},
    shared_bias=True,
    memory=_memory,
)
