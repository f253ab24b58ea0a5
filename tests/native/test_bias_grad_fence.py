"""The fences around the native mask-gradient kernel (``alilama_attention.bias_grad``).

The kernel reads raw addresses, so ``mask_grad`` checks every tensor first; PyTorch's
OpenMP runtime is found through the libgomp that PyTorch ships (no /proc/self/maps);
``ALILAMA_NATIVE_BIAS_GRAD=0`` sends a learnable bias down PyTorch's own path with the
same gradients (within float32 rounding).
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F
from alilama_attention import bias_grad
from torch.testing import assert_close

pytestmark = pytest.mark.skipif(bias_grad._kernels is None, reason="the native kernels are not built (make install)")


def _inputs(b=2, h=3, t=12, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, t, d, generator=g, requires_grad=True) for _ in range(3))
    bias = torch.randn(h, t, t, generator=g).requires_grad_()
    mask = bias.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))[None]
    return q, k, v, bias, mask


def _forward_state(q, k, v, mask):
    flash, _ = bias_grad.fused_cpu_kernels()
    scale = q.size(-1) ** -0.5
    out, lse = flash(q.detach(), k.detach(), v.detach(), 0.0, False, attn_mask=mask.detach(), scale=scale)
    return out, lse, scale


def test_the_openmp_runtime_is_the_one_pytorch_loaded():
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("PyTorch is not built with OpenMP here")
    address = bias_grad._torch_openmp_parallel()
    if sys.platform.startswith("linux"):
        with open("/proc/self/maps") as maps:  # what the lookup used to scan: the two must agree
            paths = sorted({line.split()[-1] for line in maps if "/libgomp" in line})
        if len(paths) == 1:
            import ctypes

            want = ctypes.cast(ctypes.CDLL(paths[0]).GOMP_parallel, ctypes.c_void_p).value
            assert address == want


def test_opting_out_takes_pytorchs_path_with_the_same_gradients(monkeypatch):
    q, k, v, bias, mask = _inputs()
    assert bias_grad.supported(q, k, v, mask)
    dout = torch.randn(q.shape)
    out = bias_grad.LearnableMaskAttention.apply(q, k, v, mask, True)
    got = torch.autograd.grad(out, (q, k, v, bias), dout, retain_graph=True)
    monkeypatch.setenv("ALILAMA_NATIVE_BIAS_GRAD", "0")
    assert not bias_grad.supported(q, k, v, mask)
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v, bias), dout)
    for a, w in zip(got, want):
        assert_close(a, w, rtol=1e-4, atol=2e-5)
    monkeypatch.setenv("ALILAMA_NATIVE_BIAS_GRAD", "1")
    assert bias_grad.supported(q, k, v, mask)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda a: {**a, "mask": a["mask"].double()}, "float32 CPU"),
        (lambda a: {**a, "dout": a["dout"][:, :, :-1]}, "dout has shape"),
        (lambda a: {**a, "lse": a["lse"][..., :-1]}, "lse has shape"),
        (lambda a: {**a, "k": a["k"][:, :, :-1]}, "v has shape"),  # k and v disagree on S
        (lambda a: {**a, "mask": a["mask"][:, :, :, :-1]}, "mask has shape"),
        (lambda a: {**a, "mask": a["mask"].expand(5, -1, -1, -1)}, "mask has shape"),
        (lambda a: {**a, "q": a["q"][0]}, "q must be"),
    ],
)
def test_mask_grad_refuses_what_the_kernel_cannot_read(change, message):
    q, k, v, bias, mask = _inputs()
    out, lse, scale = _forward_state(q, k, v, mask)
    args = {"q": q.detach(), "k": k.detach(), "v": v.detach(), "out": out, "lse": lse,
            "dout": torch.randn(q.shape), "mask": mask.detach()}  # fmt: skip
    ok = bias_grad.mask_grad(**args, causal=True, scale=scale)
    assert ok.shape == mask.shape
    with pytest.raises(ValueError, match=message):
        bias_grad.mask_grad(**change(args), causal=True, scale=scale)


def test_non_contiguous_rows_are_copied_not_refused():
    q, k, v, bias, mask = _inputs()
    out, lse, scale = _forward_state(q, k, v, mask)
    dout = torch.randn(q.shape)
    want = bias_grad.mask_grad(q.detach(), k.detach(), v.detach(), out, lse, dout, mask.detach(), True, scale)
    dout_t = dout.transpose(-1, -2).contiguous().transpose(-1, -2)  # last axis strided
    got = bias_grad.mask_grad(q.detach(), k.detach(), v.detach(), out, lse, dout_t, mask.detach(), True, scale)
    assert torch.equal(got, want)
