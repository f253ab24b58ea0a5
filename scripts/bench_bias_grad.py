"""Benchmark: the learnable-bias gradient kernel (fused forward + native mask gradient) vs PyTorch's own path.

PyTorch's own path is what ``sdpa`` runs when ``bias_grad.supported()`` declines:
``F.scaled_dot_product_attention`` with a mask that requires grad (the math kernel).
Same set-up as ``benchmarks/test_plugins.py::test_learnable_bias_attention``: H=8, D=16,
4,096 tokens (B = 4096 // T), causal (1, H, T, T) trainable bias, forward + backward.

    .venv/bin/python scripts/bench_bias_grad.py [--rounds 9] [--t 128 512 1024]

Prints the median (and min/max) ms per call of each path, interleaved in one process.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from alilama_attention import bias_grad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--t", type=int, nargs="+", default=[128, 512, 1024])
    args = ap.parse_args()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, kernels built: {bias_grad._kernels is not None}"
    )
    for t in args.t:
        b = max(1, 4096 // t)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, 8, t, 16, generator=g, requires_grad=True) for _ in range(3))
        bias = torch.randn(8, t, t, generator=g).requires_grad_()
        hidden = ~torch.ones(t, t, dtype=torch.bool).tril()
        dout = torch.randn(b, 8, t, 16, generator=g)

        def call(path: str):
            mask = bias.masked_fill(hidden, float("-inf"))[None]
            if path == "kernel":
                out = bias_grad.LearnableMaskAttention.apply(q, k, v, mask, True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return torch.autograd.grad(out, (q, k, v, bias), dout)

        paths = ["kernel", "torch-math"]
        times: dict[str, list[float]] = {p: [] for p in paths}
        for p in paths:
            call(p)  # warm-up
        for _ in range(args.rounds):
            for p in paths:
                t0 = time.perf_counter()
                call(p)
                times[p].append((time.perf_counter() - t0) * 1e3)
        ref = [x.double() for x in call("torch-math")]
        got = call("kernel")
        err = max(float((a.double() - r).abs().max()) for a, r in zip(got, ref))
        line = ", ".join(
            f"{p} {statistics.median(v):.1f} ms (min {min(v):.1f}, max {max(v):.1f})" for p, v in times.items()
        )
        ratio = statistics.median(times["torch-math"]) / statistics.median(times["kernel"])
        print(f"T={t} B={b}: {line}; torch/kernel {ratio:.2f}x; max |grad diff| {err:.2e}")


if __name__ == "__main__":
    main()
