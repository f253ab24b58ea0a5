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
