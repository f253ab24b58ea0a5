"""Fused CPU attention for an additive mask that needs a gradient (a learnable positional bias).

``F.scaled_dot_product_attention`` runs PyTorch's fused CPU kernel only when the
mask needs no gradient; a learnable bias (a scheme whose parameters require
grad) sends it down the unfused math path, which builds and keeps every
``(B, H, T, S)`` probability. ``LearnableMaskAttention`` keeps the fused kernel
for the forward pass and for ``dq, dk, dv``, and gets the mask's gradient from
one native pass (``native/bias_grad.hpp``) that recomputes the probabilities
from the forward's log-sum-exp and sums them over the batch in registers:

    dS = P * (dout @ v^T - rowsum(dout * out)),   P = exp(scale * q @ k^T + mask - lse)

``supported()`` says when it applies: float32 tensors on the CPU, one head size
for q, k and v, a 4-D mask with a head axis, the native module built, and
PyTorch's fused CPU kernel present. That kernel is a private ATen op
(``fused_cpu_kernels()``); a PyTorch release without it declines this path, and
``sdpa`` runs the public ``F.scaled_dot_product_attention`` instead.
``ALILAMA_NATIVE_BIAS_GRAD=0`` declines it too (PyTorch's own path, the math
kernel, for every call): the native pass is on by default because it is faster
from T=128 up (``scripts/bench_bias_grad.py``: about 1.2x at T=128, 2.2x at
T=512 and T=1024 on two cores) and keeps no ``(B, H, T, S)`` probabilities.

The native module takes addresses, not tensors (it is built without PyTorch, whose
headers and exact version the isolated build does not have), so ``mask_grad``
checks every tensor's dtype, device, shape and layout before passing them.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from typing import Any

import torch
from torch import Tensor

try:
    from alilama_attention import _kernels
except ImportError:  # a source tree without the native build: the math path runs instead
    _kernels = None


def _address_of_gomp_parallel(lib: ctypes.CDLL) -> int:
    try:
        return ctypes.cast(lib.GOMP_parallel, ctypes.c_void_p).value or 0
    except AttributeError:
        return 0


@functools.cache
def _torch_openmp_parallel() -> int:
    """The address of ``GOMP_parallel`` in the GNU OpenMP runtime PyTorch runs on (0: none).

    The native pass then runs on PyTorch's own worker threads: those spin for a
    few milliseconds after each parallel region, and threads of its own would
    have to share the cores with them (about 2x slower on two cores). Looked up
    on the first bias gradient, not at import: most processes never need it.

    The runtime is the ``libgomp`` that the PyTorch wheel ships in ``torch/lib``
    (or ``torch.libs``), taken only if already loaded (``RTLD_NOLOAD``: PyTorch
    loaded it, so it is the one PyTorch runs on); failing that (a PyTorch that
    links a system libgomp), the symbol in the process's global scope. 0 when
    PyTorch is not built with OpenMP, or no such runtime is found: the kernel
    then starts threads of its own.
    """
    if _kernels is None or "OpenMP" not in torch.__config__.parallel_info():
        return 0
    here = os.path.dirname(torch.__file__)
    candidates = sorted(glob.glob(os.path.join(here, "lib", "libgomp*.so*")))
    candidates += sorted(glob.glob(os.path.join(os.path.dirname(here), "torch.libs", "libgomp*.so*")))
    no_load = getattr(os, "RTLD_NOLOAD", 0)
    found = set()
    for path in candidates:
        if not no_load:
            break
        try:
            lib = ctypes.CDLL(path, mode=no_load | getattr(os, "RTLD_LAZY", 1))
        except OSError:  # not loaded
            continue
        address = _address_of_gomp_parallel(lib)
        if address:
            found.add(address)
    if len(found) == 1:
        return found.pop()
    if found:  # two of PyTorch's runtimes loaded and no telling which it runs on
        return 0
    try:
        return _address_of_gomp_parallel(ctypes.CDLL(None))
    except OSError:  # no dlopen(NULL) (not a POSIX system)
        return 0


def _enabled() -> bool:
    """``ALILAMA_NATIVE_BIAS_GRAD=0`` turns the native path off (read on each call)."""
    return os.environ.get("ALILAMA_NATIVE_BIAS_GRAD", "1").strip().lower() not in ("0", "false", "no", "off")


@functools.cache
def fused_cpu_kernels() -> tuple[Any, Any] | None:
    """PyTorch's fused CPU attention forward and backward ops, or ``None`` where this release lacks them.

    They are private ATen ops (``_scaled_dot_product_flash_attention_for_cpu``
    and its ``_backward``), so no release promises them; looked up on first use.
    """
    forward = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    return None if forward is None or backward is None else (forward, backward)


def supported(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> bool:
    """Whether ``LearnableMaskAttention`` computes this call (else use the math path)."""
    return (
        _kernels is not None
        and _enabled()
        and mask.requires_grad
        and torch.is_grad_enabled()
        and q.device.type == "cpu"
        and all(t.dtype == torch.float32 for t in (q, k, v, mask))
        and q.dim() == 4
        and q.size(-1) == k.size(-1) == v.size(-1)  # the fused kernel's requirement
        and q.size(-2) > 0
        and k.size(-2) > 0
        and mask.dim() == 4
        and mask.size(0) in (1, q.size(0))
        and mask.size(1) == q.size(1)
        and mask.shape[-2:] == (q.size(-2), k.size(-2))
        and fused_cpu_kernels() is not None
    )


def mask_grad(q, k, v, out, lse, dout, mask, causal: bool, scale: float) -> Tensor:
    """The gradient of ``mask`` (``(B or 1, H, T, S)``, summed over the batch when shared by it).

    ``out`` and ``lse`` are the fused forward's output and log-sum-exp.
    """
    rows = [x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v, out, dout)]
    lse, mask = lse.contiguous(), mask.contiguous()
    _check_kernel_arguments(*rows, lse, mask)
    b, h, t, d = q.shape
    s = k.size(-2)
    grad = torch.empty(mask.shape, dtype=torch.float32)
    rows_and_strides = [a for x in rows for a in (x.data_ptr(), list(x.stride()[:3]))]
    sizes = (b, h, t, s, d, mask.size(0) > 1, causal, scale)
    threads = (torch.get_num_threads(), _torch_openmp_parallel())
    _kernels.mask_grad(*rows_and_strides, lse.data_ptr(), mask.data_ptr(), grad.data_ptr(), *sizes, *threads)
    return grad


def _check_kernel_arguments(q, k, v, out, dout, lse, mask) -> None:
    """What the native pass reads through raw addresses: refuse anything else rather than read out of bounds."""
    named = {"q": q, "k": k, "v": v, "out": out, "dout": dout, "lse": lse, "mask": mask}
    for name, x in named.items():
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise ValueError(f"mask_grad: {name} must be a float32 CPU tensor, not {x.dtype} on {x.device}")
    if q.dim() != 4:
        raise ValueError(f"mask_grad: q must be (B, H, T, D), not {tuple(q.shape)}")
    b, h, t, d = q.shape
    s = k.size(-2) if k.dim() == 4 else -1
    want = {
        "k": (b, h, s, d), "v": (b, h, s, d), "out": (b, h, t, d), "dout": (b, h, t, d), "lse": (b, h, t),
    }  # fmt: skip
    for name, shape in want.items():
        if tuple(named[name].shape) != shape:
            raise ValueError(f"mask_grad: {name} has shape {tuple(named[name].shape)}, expected {shape}")
    if mask.dim() != 4 or mask.size(0) not in (1, b) or tuple(mask.shape[1:]) != (h, t, s):
        raise ValueError(f"mask_grad: mask has shape {tuple(mask.shape)}, expected (1 or {b}, {h}, {t}, {s})")
    if b * h * t * s > 0 and d <= 0:
        raise ValueError("mask_grad: the head size must be positive")
    for name in ("q", "k", "v", "out", "dout"):
        x = named[name]
        if x.numel() and x.stride(-1) != 1:
            raise ValueError(f"mask_grad: the rows of {name} must be contiguous (stride {x.stride()})")
    for name in ("lse", "mask"):
        if not named[name].is_contiguous():
            raise ValueError(f"mask_grad: {name} must be contiguous")


class LearnableMaskAttention(torch.autograd.Function):
    """``softmax(scale * q @ k^T + mask) @ v`` with gradients for q, k, v and the mask.

    ``causal`` only says that the mask is ``-inf`` above the (bottom-right aligned)
    diagonal, so the kernel may skip those entries; the mask itself must say so.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, causal: bool) -> Tensor:
        scale = q.size(-1) ** -0.5
        if fused_cpu_kernels() is None:
            raise RuntimeError(f"torch {torch.__version__} lacks the fused CPU attention kernel (see supported())")
        flash, _ = fused_cpu_kernels()
        out, lse = flash(q, k, v, 0.0, False, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout: Tensor):
        q, k, v, mask, out, lse = ctx.saved_tensors
        dq = dk = dv = dmask = None
        if any(ctx.needs_input_grad[:3]):
            _, flash_backward = fused_cpu_kernels()
            dq, dk, dv = flash_backward(dout, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=ctx.scale)
        if ctx.needs_input_grad[3]:
            dmask = mask_grad(q, k, v, out, lse, dout, mask, ctx.causal, ctx.scale)
        return dq, dk, dv, dmask, None
