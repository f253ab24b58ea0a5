"""What `alilama train` prints outside a terminal: the start banner, plain log lines, evaluations, rank 0 only."""

from __future__ import annotations

import re

from alilama_testing import ok, run_cli, run_ddp

from alilama_core.engine.threads import default_threads

COMMON = [
    "--preset",
    "tiny",
    "--no-progress",
    "train.max_steps=12",
    "train.eval_every=6",
    "train.log_every=2",
    "train.batch_size=8",
    "train.warmup_steps=1",
    "train.device=cpu",
    "train.sample_prompts=[]",
]

LOG = re.compile(
    r"^step (\d+)/12 \| loss \d+\.\d+ \| lr [0-9.e+-]+ \| [\d,]+ tok/s \| elapsed \d+:\d\d:\d\d \| ETA \d+:\d\d:\d\d$"
)
EVAL = re.compile(r"^step (\d+)/12 eval \| val loss \d+\.\d+ \| val bpb \d+\.\d+$")


def test_no_progress_prints_a_banner_log_lines_and_evaluations(data_dir, tmp_path):
    out = ok(run_cli("train", "--out", str(tmp_path / "run"), "--data", str(data_dir), "--threads", "1", *COMMON))
    lines = out.splitlines()
    banner = "\n".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("step "))])
    assert re.search(r"model: [\d,]+ parameters \| [\d,]+ tokens per step \(batch 8 x context \d+\)", banner)
    assert re.search(r"data: [\d,]+ train tokens; 12 steps cover [\d.e+-]+ epochs of the train split", banner)
    assert "device cpu | threads 1 per process | dtype float32 | attention " in banner
    logs = [int(m.group(1)) for m in map(LOG.match, lines) if m]
    evals = [int(m.group(1)) for m in map(EVAL.match, lines) if m]
    assert logs == [2, 4, 6, 8, 10, 12] and evals == [6, 12]
    assert any(6 < step < 12 for step in logs)  # a log line between evaluations
    assert sum(line.startswith("done: step 12, val loss") for line in lines) == 1


def test_the_banner_names_auto_attention_choice_and_time_budget(data_dir, tmp_path):
    args = [*COMMON, "model.attention=auto", "train.max_time=600"]
    out = ok(run_cli("train", "--out", str(tmp_path / "run"), "--data", str(data_dir), *args))
    assert re.search(r"attention auto -> \w+ \(training, \w+\) \| time budget 600 s", out)
    assert re.search(r"threads \d+ per process", out)


def test_bad_threads_are_refused(data_dir, tmp_path):
    result = run_cli("train", "--out", str(tmp_path / "run"), "--data", str(data_dir), "--threads", "0", *COMMON)
    assert result.returncode != 0 and "train.threads must be a positive integer" in result.stdout + result.stderr


def test_under_torchrun_only_rank_0_prints(data_dir, tmp_path):
    result = run_ddp(tmp_path / "two", ["--data", str(data_dir), *COMMON], port=29531)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert out.count("tokens per step") == 1 and out.count("done: step 12") == 1
    assert (
        "x 2 processes (DDP)" in out and f"threads {max(1, default_threads() // 2)} per process" in out
    )  # the cores shared by 2 ranks
    assert sum(bool(LOG.match(line)) for line in out.splitlines()) == 6


def test_under_a_budget_the_bar_and_lines_end_at_the_steps_that_ran():
    import io

    from alilama_trainers.trainer import _Progress
    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=True)
    bar = _Progress(None, 0, True, budget=10.0, console=console)
    for step in range(1, 8):  # one step a second: the budget allows about ten
        bar.update(step, 2.0, 64 * step, float(step), {}, 1e-3, budget_left=10.0 - step)
    assert bar.progress.tasks[0].total == 10
    bar.close(7)
    assert bar.progress.tasks[0].total == 7 and bar.progress.tasks[0].completed == 7

    lines: list[str] = []
    plain = _Progress(None, 0, False, echo=lines.append, log_every=5, budget=10.0)
    for step in range(1, 8):
        plain.update(step, 2.0, 64 * step, float(step), {}, 1e-3, budget_left=10.0 - step)
    plain.close(7)
    assert lines[0].startswith("step 5/~10 | loss 2.0000") and lines[-1].startswith("step 7/7 | loss 2.0000")
