"""``alilama sweep`` on a real two-node Ray cluster on loopback: a 2 x 2 grid of tiny models, one trial's
training process killed mid-run, every row still there, the killed trial bit-identical to an uninterrupted
run, and a second run that trains nothing. Bad input is refused before Ray starts.

One sweep is shared by the assertions (Ray's start-up costs seconds).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alilama_testing import run_cli
from typer.testing import CliRunner

from alilama_core.app.cli import get_app
from alilama_core.runs.checkpoint import FINAL, WEIGHTS, checkpoints, load_run

pytest.importorskip("ray.tune", reason="alilama sweep needs the sweep extra (ray[tune])")

FIXED = [
    "train.max_steps=300",
    "train.checkpoint_every=25",
    "train.eval_every=100",
    "train.log_every=50",
    "train.sample_prompts=[]",
]
GRID = ["model.positional=alibi,rope", "train.seed=0,1"]


def sweep_args(data: Path, out: Path) -> list[str]:
    return ["sweep", "--preset", "tiny", "--data", str(data), "--out", str(out), *FIXED, *GRID]


@pytest.fixture(scope="module")
def cluster():
    """Ray's own cluster utilities: a head node and a second node, one CPU each, both on loopback."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


def until(condition, proc: subprocess.Popen, seconds: float = 150):
    """Poll ``condition()`` while ``proc`` runs; its first true value (None if the process ended or time ran out)."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    return None


def finished(run: Path) -> bool:
    return (run / FINAL).exists()


@pytest.fixture(scope="module")
def swept(cluster, sweep_data, tmp_path_factory):
    """The sweep through the CLI on the cluster, interrupted twice: one trial's training process is SIGKILLed
    once it has a checkpoint (Tune retries it), then the whole sweep (the driver) is SIGKILLed while some
    trials are done and others not; the same command run again finishes it."""
    out = tmp_path_factory.mktemp("sweeps") / "grid"
    command = [sys.executable, "-m", "alilama_core", *sweep_args(sweep_data, out), "--address", cluster]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:

        def kill_a_trial():
            for run in sorted((out / "trials").glob("*")):
                pid = out / "logs" / f"{run.name}.pid"
                if checkpoints(run) and not finished(run) and pid.is_file():
                    os.kill(int(pid.read_text()), signal.SIGKILL)
                    return run.name

        killed = until(kill_a_trial, proc)
        assert killed, f"no trial was caught mid-run to kill:\n{proc.communicate()[0]}"
        log = out / "logs" / f"{killed}.log"

        def some_done_some_not():
            runs = list((out / "trials").glob("*"))
            retried = "--resume" in log.read_text()
            return retried and any(finished(r) for r in runs) and not all(finished(r) for r in runs)

        assert until(some_done_some_not, proc), proc.communicate()[0]
        proc.kill()  # the driver, mid-sweep
        first, _ = proc.communicate(timeout=60)
        done_before = {
            r.name: (r / FINAL / WEIGHTS).stat().st_mtime_ns for r in (out / "trials").glob("*") if finished(r)
        }
        again = subprocess.run(command, capture_output=True, text=True, timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert again.returncode == 0, again.stdout + again.stderr
    assert 0 < len(done_before) < 4
    done_after = {n: (out / "trials" / n / FINAL / WEIGHTS).stat().st_mtime_ns for n in done_before}
    assert done_after == done_before  # what had finished was not trained again
    assert f"{len(done_before)} already done or stopped, training {4 - len(done_before)} on Ray" in again.stdout
    return out, first, again.stdout + again.stderr, killed


def rows(out: Path) -> list[dict]:
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_every_trial_finishes_although_one_was_killed(swept):
    out, first, stdout, killed = swept
    table = rows(out)
    assert [(r["model.positional"], r["train.seed"]) for r in table].count(("alibi", "0")) == 1
    assert {(r["model.positional"], r["train.seed"]) for r in table} == {
        ("alibi", "0"),
        ("alibi", "1"),
        ("rope", "0"),
        ("rope", "1"),
    }
    assert all(r["status"] == "done" and r["step"] == "300" for r in table)
    values = [float(r["val_bpb"]) for r in table]
    assert values == sorted(values)  # best (lowest) first
    assert f"retrying  {killed}" in first
    assert "--resume" in (out / "logs" / f"{killed}.log").read_text()
    record = json.loads((out / "sweep.json").read_text())
    assert record["space"] == {"model.positional": ["alibi", "rope"], "train.seed": ["0", "1"]}
    assert record["seed"] == 0 and record["search"] == "grid"
    assert {t["status"] for t in record["trials"]} == {"done"}
    best = table[0]
    assert f"best: {best['trial']} val_bpb {float(best['val_bpb']):.4f}" in stdout
    assert "reproduce: alilama train --preset tiny" in stdout
    assert "| rank | val_bpb | model.positional | train.seed |" in (out / "results.md").read_text()
    assert (out / "results.png").stat().st_size > 10_000
    over_seeds = (out / "results-seeds.md").read_text().splitlines()  # the two seeds of each scheme in one row
    assert over_seeds[0] == "| model.positional | seeds | val_bpb |" and len(over_seeds) == 4
    for line, scheme in zip(over_seeds[2:], ["alibi", "rope"]):
        mine = [t["metric"] for t in record["trials"] if t["overrides"]["model.positional"] == scheme]
        assert line == f"| {scheme} | 2 | {sum(mine) / 2:.4f} ({min(mine):.4f}–{max(mine):.4f}) |"


def test_a_trial_is_an_ordinary_run_with_its_overrides(swept):
    out, *_ = swept
    record = json.loads((out / "sweep.json").read_text())
    for trial in record["trials"]:
        run = load_run(out / "trials" / trial["name"])
        assert run.config.model.positional == trial["overrides"]["model.positional"]
        assert run.config.train.seed == int(trial["overrides"]["train.seed"])
        assert run.config.train.max_steps == 300


def test_the_killed_trial_equals_an_uninterrupted_run(swept, sweep_data, tmp_path):
    import torch

    out, *_, killed = swept
    [trial] = [t for t in json.loads((out / "sweep.json").read_text())["trials"] if t["name"] == killed]
    overrides = [f"{k}={v}" for k, v in trial["overrides"].items()]
    ref = tmp_path / "ref"
    args = ["train", "--preset", "tiny", "--data", str(sweep_data), "--out", str(ref), "--no-progress"]
    done = run_cli(*args, "--threads", "1", *FIXED, *overrides)
    assert done.returncode == 0, done.stderr
    resumed = load_run(out / "trials" / killed).model.state_dict()
    uninterrupted = load_run(ref).model.state_dict()
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


def test_running_it_again_trains_nothing_and_prints_the_same_table(swept, sweep_data):
    out, _, stdout, _ = swept
    before = {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("*")}
    again = run_cli(*sweep_args(sweep_data, out))  # no --address: nothing to train, so no Ray either
    assert again.returncode == 0, again.stderr
    assert "all 4 trials done or stopped; nothing to train" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("*")} == before
    table = (out / "results.md").read_text()
    assert table in stdout and table in again.stdout
    assert table in cli("sweep", "--out", str(out), "--report-only").output


def cli(*args: str):
    return CliRunner().invoke(get_app(), list(args), catch_exceptions=True)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["model.positionl=alibi,rope"], "no field 'positionl'"),
        (["model.positional=alibi,,rope"], "an empty value in the list"),
        (["model.positional=alibi,bogus"], "bogus"),
        (["--mode", "up", "train.seed=0,1"], "--mode must be min or max"),
        (["train.seed=0,1", "train.seed=2"], "train.seed is both swept"),
    ],
)
def test_bad_overrides_are_refused_before_anything_runs(sweep_data, tmp_path, extra, says):
    result = cli("sweep", "--preset", "tiny", "--data", str(sweep_data), "--out", str(tmp_path / "s"), *extra)
    assert result.exit_code == 1
    assert says in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "extra, says",
    [
        (["task.name=sorting"], "unknown task 'sorting'; available: addition, copy"),
        (["task.name=copy,sorting"], "unknown task 'sorting'"),
        (["task.name="], "trains on no task (task.name is empty) and no --data"),
    ],
)
def test_a_task_sweep_with_a_bad_task_is_refused_before_anything_runs(tmp_path, extra, says):
    """The tasks study narrowed or widened to a task that does not exist: said before Ray starts, nothing written."""
    tasks = str(Path(__file__).resolve().parents[2] / "configs" / "sweeps" / "tasks.yaml")
    result = cli("sweep", tasks, "--out", str(tmp_path / "s"), *extra)
    assert result.exit_code == 1
    assert says in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "text, says",
    [
        ("space: [model.positional\n", "is not valid YAML (line 2)"),
        ("spaces:\n  train.seed: [0, 1]\n", "unknown key(s) spaces"),
        ("space:\n  train.seed: []\n", "space.train.seed is an empty list"),
        ("- train.seed\n", "must be a mapping"),
        ("points: [a, b]\n", "points must map a name to its overrides"),
        ("points:\n  a b: {}\n", "point name 'a b' may hold only"),
        ("points:\n  a: {train.lr: {x: 1}}\n", "points.a must map section.field to one value"),
        ("points:\n  a: {point: b}\n", "a point cannot name another point"),
        ("points:\n  a: {train.seed: 1}\nspace:\n  train.seed: [0, 1]\n", "point a sets train.seed, which the space"),
        ("points:\n  a: {}\nspace:\n  point: [a, c]\n", "point=c: no such point; the sweep defines a"),
        ("space:\n  point: [a]\n", "the sweep defines no points"),
        ("points:\n  a: {model.positionl: alibi}\n", "no field 'positionl'"),
    ],
)
def test_a_bad_sweep_file_is_refused(sweep_data, tmp_path, text, says):
    file = tmp_path / "sweep.yaml"
    file.write_text(text)
    result = cli("sweep", str(file), "--preset", "tiny", "--data", str(sweep_data), "--out", str(tmp_path / "s"))
    assert result.exit_code == 1
    assert says in result.output


def test_another_sweep_in_the_same_folder_is_refused(swept, sweep_data):
    out, *_ = swept
    result = cli("sweep", "--preset", "tiny", "--data", str(sweep_data), "--out", str(out), *FIXED, "train.seed=0,1,2")
    assert result.exit_code == 1
    assert "holds another sweep" in result.output and "another --out" in result.output
