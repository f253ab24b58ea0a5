"""The training pipeline beside a plain PyTorch loop over the same model and data.

Both run N steps of the essay config (B=32, T=128) from the same memory-mapped
tokens. The pipeline is ``DefaultTrainer.fit`` with everything it does on the
way (LR schedule, clipping, metrics, a final checkpoint and a small final
evaluation); the plain loop is sample, forward, loss, backward, AdamW step.

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_training.py --benchmark-only
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from alilama_bench import FULL, prepared_stories
from alilama_trainers.trainer import DefaultTrainer

from alilama_core.engine import configs as cfgmod
from alilama_core.engine.model import build_model
from alilama_core.runs.data import TokenData
from alilama_core.runs.windows import random_windows

STEPS = 30 if FULL else 2
GROUP = f"{STEPS} training steps, essay model, B=32, T=128"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return prepared_stories(tmp_path_factory.mktemp("bench-train"))


def essay_config(vocab: int, preset: str = "essay") -> cfgmod.Config:
    cfg = cfgmod.preset(preset)
    cfg.model.vocab_size = vocab
    t = cfg.train
    t.max_steps, t.warmup_steps, t.log_every = STEPS, 5, 10
    t.eval_every, t.checkpoint_every, t.eval_tokens = 10**9, 10**9, 4 * 128
    t.sample_prompts = []
    return cfg


@pytest.mark.slow  # trains each recipe
@pytest.mark.parametrize("preset", ["essay", "fast"])
def test_pipeline(benchmark, data_dir, tmp_path, preset):
    """The pipeline with the essay recipe (AdamW, cosine) and with ``fast`` (Muon, WSD; goal: within 10%)."""
    cfg = essay_config(TokenData(data_dir).meta["vocab_size"], preset)

    def run():
        shutil.rmtree(tmp_path / "run", ignore_errors=True)
        DefaultTrainer(cfg, echo=lambda *a: None, show_progress=False).fit(str(data_dir), str(tmp_path / "run"))

    benchmark.group = GROUP
    benchmark.extra_info["tokens"] = STEPS * 32 * 128
    benchmark.pedantic(run, rounds=3 if FULL else 1, warmup_rounds=0)


def test_plain_pytorch_loop(benchmark, data_dir):
    data = TokenData(data_dir)
    tokens = data.split("train")
    cfg = essay_config(data.meta["vocab_size"])

    def run():
        torch.manual_seed(0)
        model = build_model(cfg.model)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        rng = np.random.default_rng(0)
        for _ in range(STEPS):
            x, y = random_windows(tokens, rng.integers(0, len(tokens) - 128, size=32), 128)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    benchmark.group = GROUP
    benchmark.extra_info["tokens"] = STEPS * 32 * 128
    benchmark.pedantic(run, rounds=3 if FULL else 1, warmup_rounds=0)
