"""``alilama sweep`` without --address: Ray starts in the process on 2 CPUs, and stops; a random search
with ASHA, which sees every evaluation as the trial logs it."""

from __future__ import annotations

import json

import pytest
from alilama_testing import run_cli

from alilama_core.runs import sweeps

pytest.importorskip("ray.tune", reason="alilama sweep needs the sweep extra (ray[tune])")


def test_a_random_search_with_asha_on_a_local_ray(sweep_data, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "random"
    lrs = ["0.0003", "0.001", "0.003", "0.01"]
    args = ["sweep", "--preset", "tiny", "--data", str(sweep_data), "--out", str(out), "--num-cpus", "2"]
    args += ["--search", "random", "--samples", "3", "--seed", "1", "--scheduler", "asha", "--logger", "csv"]
    args += [f"train.lr={','.join(lrs)}"]
    result = run_cli(*args, "train.max_steps=60", "train.eval_every=10", "train.checkpoint_every=10")
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((out / "sweep.json").read_text())
    assert record["search"] == "random" and record["seed"] == 1 and record["scheduler"] == "asha"
    drawn = [t.name for t in sweeps.expand({"train.lr": lrs}, "random", 3, 1)]
    assert [t["name"] for t in record["trials"]] == drawn  # the seed decides the trials
    assert {t["status"] for t in record["trials"]} <= {"done", "stopped"}
    assert "done" in {t["status"] for t in record["trials"]}
    reported = [
        [json.loads(line)["step"] for line in path.read_text().splitlines()]
        for path in (out / ".tune").rglob("result.json")
    ]
    assert [10, 20, 30, 40, 50, 60] in reported  # a finished trial reported each evaluation to Tune
    tracked = {p.name for p in (out / "csv").iterdir()}  # --logger: every trial in one tracker's folder
    assert tracked == {t["name"] for t in record["trials"]}, tracked


def test_a_task_sweep_scored_after_training_ranks_by_a_score_column(tmp_path, monkeypatch):
    """The tasks study's shape: ``task.name`` swept, each trial scored by ``alilama eval`` at longer lengths;
    the scores are columns of the table, the metric is one of them, and a second run neither trains nor
    scores again."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "tasks"
    args = ["sweep", "--preset", "tiny", "--out", str(out), "--num-cpus", "2", "--metric", "exact@8"]
    args += ["--score=--lengths 4,8 --examples 16", "task.name=copy,reverse", "task.lengths=1-4"]
    args += ["train.max_steps=20", "train.eval_every=10", "train.checkpoint_every=10", "train.sample_prompts=[]"]
    result = run_cli(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((out / "sweep.json").read_text())
    assert record["mode"] == "max" and record["score"] == ["--lengths", "4,8", "--examples", "16"]
    for trial in record["trials"]:
        assert trial["status"] == "done"
        assert set(trial["scores"]) == {"exact@4", "token_acc@4", "exact@8", "token_acc@8"}
        assert trial["metric"] == trial["scores"]["exact@8"]
        kept = json.loads((out / "trials" / trial["name"] / "task-eval.json").read_text())
        assert [r["length"] for r in kept["rows"]] == [4, 8]  # the scores are `alilama eval`'s own
        assert trial["scores"]["exact@4"] == kept["rows"][0]["exact_match"]
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["rank", "exact@8", "task.name"] and "token_acc@4" in header
    scored = {p: p.stat().st_mtime_ns for p in out.rglob("sweep-score.json")}
    again = run_cli(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to train" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in out.rglob("sweep-score.json")} == scored
    assert (out / "results.md").read_text() in again.stdout


def test_an_optuna_search_over_a_range_continues_its_study(sweep_data, tmp_path, monkeypatch):
    """Optuna (through Ray Tune) chooses points of a continuous range; asked for one more trial, a second run
    trains only that one, its sampler told the first run's results."""
    pytest.importorskip("optuna", reason="--search optuna needs Optuna")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "optuna"
    args = ["sweep", "--preset", "tiny", "--data", str(sweep_data), "--out", str(out), "--num-cpus", "2"]
    args += ["--search", "optuna", "--seed", "3", "train.lr=loguniform(1e-3,1e-2)", "model.positional=alibi,rope"]
    args += ["train.max_steps=20", "train.eval_every=10", "train.checkpoint_every=10", "train.sample_prompts=[]"]
    result = run_cli(*args, "--samples", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((out / "sweep.json").read_text())
    assert record["space"]["train.lr"] == {"loguniform": [1e-3, 1e-2]}
    assert len(record["trials"]) == 3 and {t["status"] for t in record["trials"]} == {"done"}
    for trial in record["trials"]:
        assert 1e-3 <= float(trial["overrides"]["train.lr"]) <= 1e-2
        assert trial["overrides"]["model.positional"] in ("alibi", "rope")
        assert isinstance(trial["metric"], float)
        trained = (out / "trials" / trial["name"] / "config.yaml").read_text()
        assert f"lr: {float(trial['overrides']['train.lr'])}" in trained or trial["overrides"]["train.lr"] in trained
    first = {t["name"] for t in record["trials"]}
    more = run_cli(*args, "--samples", "4")
    assert more.returncode == 0, more.stdout + more.stderr
    assert "training 0, and 1 more that Optuna chooses" in more.stdout
    again = json.loads((out / "sweep.json").read_text())
    assert len(again["trials"]) == 4 and first < {t["name"] for t in again["trials"]}
    header = (out / "results.csv").read_text().splitlines()[0]
    assert header.startswith("rank,val_bpb,train.lr,model.positional")
    assert (out / "results.png").is_file()
