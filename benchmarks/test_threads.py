"""Training tokens/s of the essay config at 1 and 2 threads, on a quiet machine and beside a busy process.

Each case runs ``DefaultTrainer.fit`` for N steps of the essay config (B=32,
T=128) with ``train.threads`` set, so the trainer applies the thread count
itself (``alilama_core.engine.threads.apply_threads``). The ``busy`` cases start
one CPU-bound process (``python -c 'while True: pass'``) for the whole case, as
another job on a shared machine would; it is killed afterwards. The figures
include what the trainer does beside the steps (a final evaluation and checkpoint),
as in ``test_training.py``; tokens/s is ``extra_info["tokens"]`` over the median.

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_threads.py --benchmark-only \\
        --benchmark-columns=median,rounds
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from alilama_bench import FULL, prepared_stories
from alilama_trainers.trainer import DefaultTrainer

from alilama_core.engine import configs as cfgmod
from alilama_core.runs.data import TokenData

STEPS = 10 if FULL else 2
BATCH, CONTEXT = 32, 128


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepared_stories(tmp_path_factory.mktemp("bench-threads"))


@pytest.fixture(params=["quiet", "busy"])
def load(request):
    """``busy``: one CPU-bound process competing for the cores while the case runs."""
    if request.param == "quiet":
        yield request.param
        return
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield request.param
    finally:
        hog.kill()
        hog.wait()


def essay_config(vocab: int, threads: int) -> cfgmod.Config:
    cfg = cfgmod.preset("essay")
    cfg.model.vocab_size = vocab
    t = cfg.train
    t.batch_size, t.threads, t.device = BATCH, threads, "cpu"
    t.max_steps, t.warmup_steps, t.log_every = STEPS, 5, 10
    t.eval_every, t.checkpoint_every, t.eval_tokens = 10**9, 10**9, 4 * CONTEXT
    t.sample_prompts = []
    assert cfg.model.context_length == CONTEXT
    return cfg


@pytest.mark.parametrize("threads", [1, 2])
def test_training_tokens_per_second(benchmark, data_dir, tmp_path, threads, load):
    cfg = essay_config(TokenData(data_dir).meta["vocab_size"], threads)

    def run():
        shutil.rmtree(tmp_path / "run", ignore_errors=True)
        DefaultTrainer(cfg, echo=lambda *a: None, show_progress=False).fit(str(data_dir), str(tmp_path / "run"))

    tokens = STEPS * BATCH * CONTEXT
    benchmark.group = f"{STEPS} training steps, essay config, B={BATCH}, T={CONTEXT}: threads x load"
    benchmark.extra_info.update(tokens=tokens, threads=threads, load=load)
    benchmark.pedantic(run, rounds=3 if FULL else 1, warmup_rounds=1 if FULL else 0)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["tokens_per_s"] = round(tokens / benchmark.stats.stats.median)
