"""The compiled decode step against the eager engine: batch 1 as ``generate`` runs it, and a running batch as ``serve`` does.

The essay model (8 layers, vocab 4096, randomly initialised), one torch thread
unless ``ALILAMA_BENCH_THREADS`` says otherwise. ``decode="compiled"`` builds
the AOTInductor package once per batch size before the rounds (its build time is
in the extra info), then the paths take turns in rounds, medians:

- ``generate``, batch 1, a 16-token prompt, 256 greedy tokens: ``decode="eager"``
  (the growing ``KVCache``) and ``decode="compiled"``;
- a ``ContinuousBatch`` of 16 rows (``alilama serve``'s engine), 16 sequences of
  a 16-token prompt and 128 greedy tokens each, stepped to the end: eager and compiled.

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_decode.py --benchmark-only -s

Without ``ALILAMA_BENCH_FULL``: a 2-layer model, 8 tokens, once, Inductor's
default settings (CI). All paths produce the same tokens (asserted); the
speed-ups are in each result's extra info.
"""

from __future__ import annotations

import os
import statistics
import time

import pytest
import torch
from alilama_bench import FULL

from alilama_core import build_model
from alilama_core.engine import decode as dec
from alilama_core.engine.batching import ContinuousBatch
from alilama_core.engine.configs import preset
from alilama_core.engine.generation import SamplingSettings, generate
from alilama_core.engine.request import Request

NEW_TOKENS = 256 if FULL else 8
BATCH_TOKENS = 128 if FULL else 8
ROWS = 16 if FULL else 4
ROUNDS = 5 if FULL else 1
THREADS = int(os.environ.get("ALILAMA_BENCH_THREADS", "1"))


@pytest.fixture(scope="module")
def model():
    cfg = preset("essay").model
    if not FULL:
        cfg.n_layers = 2
    torch.manual_seed(0)
    return build_model(cfg).eval()


@pytest.fixture(autouse=True)
def threads(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    if not FULL:
        monkeypatch.setattr(dec, "INDUCTOR_CONFIGS", {"autotune_num_choices_displayed": 0})
    yield
    torch.set_num_threads(before)


def _rounds(runners: dict, rounds: int) -> tuple[dict[str, float], dict[str, object]]:
    times: dict[str, list[float]] = {name: [] for name in runners}
    outputs = {name: fn() for name, fn in runners.items()}  # warm-up
    for _ in range(rounds):
        for name, fn in runners.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, outputs


def test_generate_batch_1(benchmark, model):
    prompt = [torch.randint(0, 4096, (16,), generator=torch.Generator().manual_seed(0)).tolist()]
    start = time.perf_counter()
    step, reason = dec.compiled_step(model)
    assert reason is None, reason
    built = time.perf_counter() - start
    runners = {
        decode: (
            lambda d=decode: generate(
                model, prompt, SamplingSettings(max_new_tokens=NEW_TOKENS, temperature=0, decode=d)
            )
        )
        for decode in ("eager", "compiled")
    }
    medians, outputs = _rounds(runners, ROUNDS)
    assert outputs["compiled"] == outputs["eager"]
    rates = {name: NEW_TOKENS / m for name, m in medians.items()}
    benchmark.extra_info.update(
        tokens_per_s={k: round(v, 1) for k, v in rates.items()},
        speedup=round(rates["compiled"] / rates["eager"], 2),
        build_seconds=round(built, 1),
        threads=THREADS,
        load=os.getloadavg()[0],
    )
    print(f"\nbatch 1: {rates}, x{rates['compiled'] / rates['eager']:.2f}, build {built:.0f} s, load {os.getloadavg()}")
    benchmark.pedantic(runners["compiled"], rounds=1, iterations=1)


def test_continuous_batch_16_rows(benchmark, model):
    prompts = [torch.randint(0, 4096, (16,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(ROWS)]
    settings = SamplingSettings(max_new_tokens=BATCH_TOKENS, temperature=0)
    start = time.perf_counter()
    step, reason = dec.compiled_step(model)
    assert reason is None, reason
    built = time.perf_counter() - start

    def serve(decode: str) -> list[list[int]]:
        batch = ContinuousBatch(model, rows=ROWS, capacity=512, decode=decode)
        out: dict[int, list[int]] = {}
        for prompt in prompts:
            handle, event = batch.join(prompt, settings, ignore_eos=True)
            out[handle] = [event.token]
        while len(batch):
            for event in batch.step():
                out[event.handle].append(event.token)
        return list(out.values())

    medians, outputs = _rounds({"eager": lambda: serve("eager"), "compiled": lambda: serve("compiled")}, ROUNDS)
    assert outputs["compiled"] == outputs["eager"]
    rates = {name: ROWS * BATCH_TOKENS / m for name, m in medians.items()}
    benchmark.extra_info.update(
        tokens_per_s={k: round(v, 1) for k, v in rates.items()},
        speedup=round(rates["compiled"] / rates["eager"], 2),
        build_seconds=round(built, 1),
        threads=THREADS,
        load=os.getloadavg()[0],
    )
    print(
        f"\n{ROWS} rows: {rates}, x{rates['compiled'] / rates['eager']:.2f}, build {built:.0f} s, load {os.getloadavg()}"
    )
    benchmark.pedantic(lambda: serve("compiled"), rounds=1, iterations=1)


def test_joins_prefilled_together(benchmark, model):
    """16 requests that arrive between two steps (prompts of 12 to 27 tokens): ``join_many``, one left-padded
    forward pass, against a ``join`` each, as the server admitted them before. The first tokens are the same."""
    prompts = [
        torch.randint(0, 4096, (12 + i,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(ROWS)
    ]
    settings = SamplingSettings(max_new_tokens=1, temperature=0)

    batches = {together: ContinuousBatch(model, rows=ROWS, capacity=512, decode="eager") for together in (False, True)}

    def admit(together: bool) -> list[int | None]:
        batch = batches[together]  # a server's batch: made once, its rows freed after each round
        if together:
            joined = batch.join_many([Request(p, settings) for p in prompts])
        else:
            joined = [batch.join(p, settings) for p in prompts]
        for handle, _ in joined:
            batch.leave(handle)
        return [event.token for _, event in joined]

    medians, outputs = _rounds({"one by one": lambda: admit(False), "together": lambda: admit(True)}, 3 * ROUNDS)
    assert outputs["together"] == outputs["one by one"]
    ms = {name: round(1000 * m, 1) for name, m in medians.items()}
    benchmark.extra_info.update(
        ms=ms, speedup=round(ms["one by one"] / ms["together"], 2), threads=THREADS, load=os.getloadavg()[0]
    )
    print(f"\n{ROWS} joins: {ms} ms, x{ms['one by one'] / ms['together']:.2f}, load {os.getloadavg()}")
    benchmark.pedantic(lambda: admit(True), rounds=1, iterations=1)
