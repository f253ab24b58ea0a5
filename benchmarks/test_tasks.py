"""Task examples generated per second against the examples (and tokens) per second training consumes.

The generator runs on the training process's own thread between steps, so it
must be much faster than a training step of the smallest model that uses it:
a model half as deep as the study's (d=64, 2 blocks) on one thread, batches of 64 examples of
lengths 1-16. Both are timed side by side in one run; the ratio is recorded.

    .venv/bin/python -m pytest benchmarks/test_tasks.py --benchmark-only
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
import torch.nn.functional as F

from alilama_core.contracts.config import ModelConfig
from alilama_core.engine.model import build_model
from alilama_core.runs.tasks import TaskStream, collate, get_task

BATCH, LENGTHS = 64, (1, 16)


def draw_batch(stream: TaskStream):
    return collate(stream.draw(BATCH))  # (B, T) inputs and targets


@pytest.mark.parametrize("name", ["copy", "sort", "addition", "recall"])
def test_generate(benchmark, name):
    stream = TaskStream(get_task(name), LENGTHS, seed=0)
    x, _ = benchmark(draw_batch, stream)
    if benchmark.stats is not None:
        seconds = benchmark.stats.stats.median
        benchmark.extra_info["examples_per_s"] = round(BATCH / seconds)
        benchmark.extra_info["tokens_per_s"] = round(x.numel() / seconds)


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_generator_outpaces_training(benchmark):
    torch.set_num_threads(1)
    task = get_task("sort")
    stream = TaskStream(task, LENGTHS, seed=0)
    config = ModelConfig(
        vocab_size=len(task.vocabulary()),
        d_model=64,
        n_layers=2,
        n_heads=4,
        d_mlp=256,
        context_length=task.sequence_length(LENGTHS[1]) - 1,
        positional="alibi",
        attention="auto",
    )
    model = build_model(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = draw_batch(stream)

    def step():
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())  # -100 targets are skipped
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    benchmark.pedantic(step, rounds=5, iterations=1)
    train_s = median_seconds(step, 5)
    generate_s = median_seconds(lambda: draw_batch(stream), 20)
    ratio = train_s / generate_s
    benchmark.extra_info.update(
        train_examples_per_s=round(BATCH / train_s),
        train_tokens_per_s=round(x.numel() / train_s),
        generated_examples_per_s=round(BATCH / generate_s),
        generation_share_of_step=round(1 / (1 + ratio), 4),
        ratio=round(ratio, 1),
    )
    print(
        f"training consumes {BATCH / train_s:,.0f} examples/s ({x.numel() / train_s:,.0f} tokens/s); "
        f"the generator makes {BATCH / generate_s:,.0f} examples/s: {ratio:.0f}x faster"
    )
    assert ratio > 5, f"generating a batch takes {generate_s * 1e3:.1f} ms, a training step {train_s * 1e3:.1f} ms"
