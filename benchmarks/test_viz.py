"""``alilama viz attention`` on the essay model with a 128-token prompt: target under 5 s.

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_viz.py --benchmark-only \\
        --benchmark-columns=median,iqr,rounds

Rows, side by side in one run: a plain forward pass of the model (what any
reader of attention pays at least), the forward pass with attention capture
(every layer's and head's probabilities and the logit lens), the work of the
command (load the run, capture, draw the 8 x 8 grid of 128 x 128 maps with
token labels, write the HTML tape), and the command itself in a new process
(interpreter start and imports included). The model is randomly initialised (the
time does not depend on the weights). Each result's extra info also holds
``cpu_s_median``, the CPU seconds of a call (process and children), which a
busy shared machine does not inflate as it does the wall-clock time. Without
``ALILAMA_BENCH_FULL`` each row runs once (CI).
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
import torch
from alilama_bench import FULL

from alilama_core import build_model, preset

PROMPT_TOKENS = 128
TARGET_S = 5.0
ROWS = ["forward", "capture", "viz-attention", "viz-attention-command"]


@pytest.fixture(scope="module")
def essay_run(tmp_path_factory):
    """The essay model as a run folder and a prompt of exactly 128 tokens."""
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    torch.manual_seed(0)
    cfg = preset("essay").model  # d=128, 8 layers, 8 heads, ALiBi, context 128
    model = build_model(cfg).eval()
    run = tmp_path_factory.mktemp("viz-bench") / "essay"
    save_weights(model, run / "final")
    save(Config(model=cfg), run / "config.yaml")
    story = (
        "Once upon a time there was a little dog named Sam who liked to run in the park with his friends. "
        "One day Sam found a big blue ball under a tree, and he barked with joy. "
    )
    tokenizer = BPETokenizer.train([story * 4], vocab_size=300, special_tokens=["<|endoftext|>"])
    tokenizer.save(run / "tokenizer")
    ids = tokenizer.encode(story * 8)[:PROMPT_TOKENS]
    prompt = tokenizer.decode(ids)
    assert len(tokenizer.encode(prompt)) == PROMPT_TOKENS
    return run, model, prompt, torch.tensor([ids])


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.mark.parametrize("name", ROWS)
def test_viz_attention_essay(benchmark, essay_run, tmp_path, name):
    from alilama_core.app.viz import attention_pictures
    from alilama_core.engine.capture import capture

    run, model, prompt, ids = essay_run
    if name == "forward":

        def go():
            with torch.no_grad():
                return model(ids)
    elif name == "capture":

        def go():
            return capture(model, ids)
    elif name == "viz-attention":

        def go():
            return attention_pictures(str(run), prompt, tmp_path)
    else:  # the whole command in a new process: interpreter start and imports included

        def go():
            cmd = [sys.executable, "-c", "from alilama_core.app.cli import main; main()", "viz", "attention"]
            subprocess.run(
                [*cmd, str(run), "--prompt", prompt, "--out", str(tmp_path)], check=True, capture_output=True
            )
            return [tmp_path / "attention.png", tmp_path / "tape.html"]

    cpu: list[float] = []

    def timed():  # CPU seconds of each call (this process and its children): robust to a busy machine
        before = _cpu_seconds()
        out = go()
        cpu.append(_cpu_seconds() - before)
        return out

    benchmark.group = f"viz attention, essay model, {PROMPT_TOKENS}-token prompt"
    rounds, warmup = (5, 1) if FULL else (1, 0)
    result = benchmark.pedantic(timed, rounds=rounds, warmup_rounds=warmup)
    benchmark.extra_info["cpu_s_median"] = round(sorted(cpu)[len(cpu) // 2], 3)
    if name.startswith("viz-attention"):
        assert sorted(p.name for p in result) == ["attention.png", "tape.html"]
        if benchmark.stats is not None:  # None under --benchmark-disable
            median = benchmark.stats.stats.median
            benchmark.extra_info["target_s"] = TARGET_S
            assert median < TARGET_S, f"{name} took {median:.2f} s (target {TARGET_S} s)"
