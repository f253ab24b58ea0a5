"""The quickstart's plan on a busy machine: a process that busy-loops on one core competes with it throughout.

Outside a terminal (stdout is a pipe here), as in CI or under ``nohup``. The
plan must hold whatever the step rate: warm-up a small share of the steps, one
evaluation at the stop and at most one per quarter of the budget, the last
progress line's total the steps that ran, and the saved config what ran.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from alilama_testing import ok, run_cli

from alilama_core.engine import configs as cfgmod
from alilama_core.engine.threads import default_threads, free_cores

MINUTES = 1.5


@pytest.fixture
def busy_core():
    """A CPU-bound process on one core (the first this test may use) for as long as the test runs."""
    core = min(os.sched_getaffinity(0))
    loop = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"],
    )
    yield core
    loop.kill()
    loop.wait()


def test_the_quickstart_plans_by_its_budget_on_a_busy_machine(busy_core, tmp_path):
    out = ok(run_cli("quickstart", "--out", str(tmp_path / "qs"), "--stories", "2000", "--minutes", str(MINUTES)))
    run = tmp_path / "qs" / "run"
    # outside a terminal every message is one line, however long (no wrapping at 80 columns)
    assert re.search(r"^\[4/6\] training for .+ an evaluation with samples at each quarter of the budget$", out, re.M)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = rows[-1]["step"]
    assert steps >= 20, f"only {steps} steps in {MINUTES} min"

    # the busy core is left alone: fewer threads than cores, said before any work
    cores = default_threads()
    if cores > 1:
        assert re.search(rf"^threads: (\d+) of {cores} physical cores; \d+ busy with other work", out, flags=re.M)
        assert cfgmod.load(run / "config.yaml").train.threads < cores

    # warm-up under a fifth of the steps: from there on the rate only falls (warm-up would raise it)
    later = [r["lr"] for r in rows if r["step"] >= 0.2 * steps]
    assert len(later) >= 2 and all(a >= b for a, b in zip(later, later[1:])), [(r["step"], r["lr"]) for r in rows]

    # evaluations by the budget: at most one per quarter, one (the last) at the stopping step
    evaluated = [r["step"] for r in rows if "val_loss" in r]
    assert 1 <= len(evaluated) <= 4 and evaluated[-1] == steps and evaluated.count(steps) == 1
    assert len(re.findall(rf"^step {steps}/\S+ eval ", out, flags=re.M)) == 1

    # the last progress line's total is the steps that ran; the closing lines name that step
    progress = [line for line in out.splitlines() if re.match(r"^step \d+/\S+ \| loss", line)]
    assert progress[-1].startswith(f"step {steps}/{steps} |")
    assert "stopped by the time budget (train.max_time=" in out and f"at step {steps}" in out

    # the saved config says what ran: a time budget, no step count; run.json names the same step
    saved = cfgmod.load(run / "config.yaml").train
    assert saved.max_steps is None and saved.max_time == pytest.approx(MINUTES * 60 / 1.15)
    assert json.loads((run / "run.json").read_text())["final"]["step"] == steps


def test_free_cores_leaves_out_a_core_another_process_keeps_busy(busy_core):
    cores = default_threads()
    free = free_cores(0.5)
    assert 1 <= free <= max(1, cores - 1)
