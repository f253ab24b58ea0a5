"""A learnable-bias plugin scheme beside ALiBi: one training step of the essay model, side by side.

``kerple-log`` (tests/plugins/alilama-kerple, a third-party package written
from docs/plugins.md) has trainable per-head parameters, so its bias is
recomputed once per forward pass and shared by all 8 layers; ALiBi's is cached.
One step: forward, loss, backward and AdamW on a (32, 128) batch.

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_plugins.py --benchmark-only
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
import torch.nn.functional as F
from alilama_bench import FULL, peak_memory_mib

from alilama_core.engine import configs as cfgmod
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_registry

BATCH, T = (32, 128) if FULL else (4, 64)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("positional", ["alibi", "kerple-log"])
def test_training_step(benchmark, positional, attention):
    benchmark.group = f"train step, essay model, B={BATCH} T={T}, {attention}"
    step = training_step(positional, attention)
    benchmark.pedantic(step, rounds=10 if FULL else 1, iterations=1)


def training_step(positional: str, attention: str):
    """One warmed-up training step of the essay model with ``positional`` and ``attention``."""
    if positional not in get_registry().names("positional"):
        pytest.skip("the kerple-log test plugin is not installed (make bench builds it into build/test-plugins)")
    cfg = cfgmod.preset("essay").model
    cfg.positional, cfg.attention = positional, attention
    torch.manual_seed(0)
    model = build_model(cfg.validate())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, cfg.vocab_size, (BATCH, T + 1), generator=torch.Generator().manual_seed(0))

    def step():
        logits = model(x[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()  # warm-up: allocations, first-call paths
    return step


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_kerple_over_alibi_alternating(benchmark, attention):
    """The ratio that matters, robust to a busy machine: the two steps alternate, one thread, medians compared."""
    benchmark.group = f"kerple-log / alibi step time, alternating, B={BATCH} T={T}"
    alibi, kerple = training_step("alibi", attention), training_step("kerple-log", attention)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {"alibi": [], "kerple-log": []}

    def alternate():
        for name, step in (("alibi", alibi), ("kerple-log", kerple)):
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)

    try:
        benchmark.pedantic(alternate, rounds=6 if FULL else 1, iterations=1)
    finally:
        torch.set_num_threads(threads)
    ratio = statistics.median(times["kerple-log"]) / statistics.median(times["alibi"])
    benchmark.extra_info.update(
        alibi_s=statistics.median(times["alibi"]), kerple_s=statistics.median(times["kerple-log"]), ratio=ratio
    )
    print(f"\n{attention}: kerple-log / alibi step time = {ratio:.2f}")


@pytest.mark.parametrize("path", ["alilama-fused", "torch-sdpa", "eager"])
@pytest.mark.parametrize("t", [128, 512])
def test_learnable_bias_attention(benchmark, path, t):
    """One attention call with a trainable (H, T, T) bias, forward and backward, 4,096 tokens (B x T).

    ``alilama-fused``: what ``sdpa`` runs for a learnable bias on the CPU (PyTorch's
    fused kernel, the bias gradient from ``alilama_attention.bias_grad``);
    ``torch-sdpa``: ``F.scaled_dot_product_attention`` with the same mask, which
    PyTorch runs on its math kernel because the mask requires grad; ``eager``:
    the textbook formula.
    """
    from alilama_attention import bias_grad

    if bias_grad._kernels is None:
        pytest.skip("the native kernels are not built (make install)")
    t = t if FULL else t // 8
    b = 4096 // t if FULL else 2
    benchmark.group = f"attention with a trainable bias, forward + backward, B={b} H=8 T={t} D=16"
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, 8, t, 16, generator=g, requires_grad=True) for _ in range(3))
    bias = torch.randn(8, t, t, generator=g).requires_grad_()
    hidden = ~torch.ones(t, t, dtype=torch.bool).tril()
    dout = torch.randn(b, 8, t, 16, generator=g)

    def call():
        mask = bias.masked_fill(hidden, float("-inf"))[None]  # (1, H, T, T)
        if path == "alilama-fused":
            out = bias_grad.LearnableMaskAttention.apply(q, k, v, mask, True)
        elif path == "torch-sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            out = torch.softmax(q @ k.transpose(-1, -2) * 0.25 + mask, dim=-1) @ v
        torch.autograd.grad(out, (q, k, v, bias), dout)

    call()
    benchmark.extra_info["peak_memory_mib"] = round(peak_memory_mib(call), 1)
    benchmark.pedantic(call, rounds=20 if FULL else 1, iterations=1)
