"""ALiBi on long contexts, CPU, one thread: forward + backward time and peak memory.

Side by side in one run, B=8, H=8, head dim 16 (the essay's heads):

- ``causal``: SDPA with ``is_causal=True`` and no bias: the floor ALiBi is measured against;
- ``alibi-mask``: ALiBi as a 4-D float mask to SDPA (what ``sdpa`` does; what transformers' ALiBi models do);
- ``alibi-eager``: the explicit reference, where it fits in memory;
- ``alibi-tiled``: the ``tiled`` backend (query blocks over the fused kernel);
- ``alibi-auto``: the default ``attention: auto`` (what it chooses for the shape).

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_long_context.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=median,iqr,rounds
"""

from __future__ import annotations

import pytest
import torch
from alilama_bench import FULL, peak_memory_mib

from alilama_core import ModelConfig
from alilama_core.contracts.attention import AttentionBias
from alilama_core.engine.registry import get_attention, get_positional

B, H, D = (8, 8, 16) if FULL else (1, 2, 16)
LENGTHS = [512, 2048, 8192] if FULL else [256]
PATHS = ["causal", "alibi-mask", "alibi-eager", "alibi-tiled", "alibi-auto"]
ROUNDS = {512: 10, 2048: 5, 8192: 2}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _fits(path: str, t: int) -> bool:
    """Eager keeps about three (B, H, T, T) float32 tensors alive; skip it past ~12 GiB."""
    return path != "alibi-eager" or 3 * B * H * t * t * 4 < 12 * 2**30


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("T", LENGTHS)
def test_forward_backward(benchmark, path, T):
    if not _fits(path, T):
        pytest.skip(f"{path} needs about {3 * B * H * T * T * 4 / 2**30:.0f} GiB at T={T}: it does not fit")
    alibi = get_positional("alibi")(ModelConfig(n_heads=H, d_model=H * D))
    backend = {
        "causal": "sdpa",
        "alibi-mask": "sdpa",
        "alibi-eager": "eager",
        "alibi-tiled": "tiled",
        "alibi-auto": "auto",
    }[path]
    fn = get_attention(backend).fn
    positional = None if path == "causal" else alibi
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3))

    def step():
        out = fn(q, k, v, positional=positional, causal=True)
        out.sum().backward()
        q.grad = k.grad = v.grad = None

    AttentionBias.clear(alibi)  # the mask is part of what the mask path costs
    benchmark.extra_info["peak_memory_mib"] = round(peak_memory_mib(step), 1)
    benchmark.group = f"fwd+bwd T={T} (B={B}, H={H}, D={D}, 1 thread)"
    benchmark.pedantic(step, rounds=ROUNDS.get(T, 1) if FULL else 1, warmup_rounds=1 if FULL else 0)
