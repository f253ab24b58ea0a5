"""A sweep from Python, ``run_sweep``: the folder, record and table ``alilama sweep`` writes, which the command
then takes for its own sweep (nothing to train, the same table). Bad settings are refused before anything is
written, as the command refuses them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from alilama_core.app.cli import get_app
from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.runs import sweeps
from alilama_core.runs.sweep_run import run_sweep

SPACE = ["task.name=copy,reverse"]
FIXED = ["task.lengths=1-4", "train.max_steps=4", "train.eval_every=2", "train.checkpoint_every=2"]
FIXED += ["train.sample_prompts=[]"]


@pytest.mark.slow  # Ray starts in the process (about a minute on two busy cores)
def test_a_sweep_from_python_is_the_commands_sweep(tmp_path, monkeypatch):
    pytest.importorskip("ray.tune", reason="a sweep trains on Ray Tune (ray[tune])")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "py"
    said, events = [], []
    result = run_sweep(out, [*SPACE, *FIXED], preset="tiny", num_cpus=2, echo=said.append, on_trial=events.append)
    assert said == [f"sweep {out}: 2 trials, 0 already done or stopped, training 2 on Ray"]
    names = [t.name for t in sweeps.expand({"task.name": ["copy", "reverse"]})]
    assert [t.name for t in result.plan.trials] == names and not result.failed
    assert sorted(e.split()[1] for e in events if e.split()[0] == "started") == sorted(names)
    assert sorted(e.split()[1] for e in events if e.split()[0] == "done") == sorted(names)

    record = json.loads((out / sweeps.SWEEP_JSON).read_text())
    assert (record["metric"], record["mode"], record["preset"]) == ("val_exact", "max", "tiny")
    assert record["space"] == {"task.name": ["copy", "reverse"]} and record["overrides"] == FIXED
    assert [t["name"] for t in record["trials"]] == names
    for trial, kept in zip(result.plan.trials, record["trials"]):
        assert kept["status"] == "done" and kept["step"] == 4 and (out / "trials" / trial.name / "final").is_dir()
        assert isinstance(kept["metric"], float) and kept["metric"] == trial.metric
    assert (out / sweeps.RESULTS_MD).read_text() == result.table
    header = (out / sweeps.RESULTS_CSV).read_text().splitlines()[0]
    assert header == "rank,val_exact,task.name,step,status,trial"
    assert result.plot == out / sweeps.RESULTS_PNG and result.plot.stat().st_size > 1000
    assert result.seeds_table is None  # no seed swept: no table over seeds
    best = result.best
    assert best.metric == max(t.metric for t in result.plan.trials)
    assert result.reproduce(best).startswith(f"alilama train --preset tiny --out runs/{best.name} task.lengths=1-4")

    again = CliRunner().invoke(get_app(), ["sweep", "--preset", "tiny", "--out", str(out), *SPACE, *FIXED])
    assert again.exit_code == 0, again.output
    assert f"sweep {out}: all 2 trials done or stopped; nothing to train" in again.output
    assert result.table in again.output and f"best: {best.name} val_exact {best.metric:.4f}" in again.output
    assert (out / sweeps.RESULTS_MD).read_text() == result.table


@pytest.mark.parametrize(
    "args, settings, says",
    [
        (["model.positional=alibi,bogus"], {}, "bogus"),
        (["train.seed=0,1"], {"mode": "up"}, "--mode must be min or max"),
        (["train.seed=0,1"], {"logger": "x"}, "--logger: .*'x'.*csv"),  # the registered loggers are listed
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, args, settings, says):
    with pytest.raises(ConfigError, match=says):
        run_sweep(tmp_path / "s", ["task.name=copy", *FIXED, *args], preset="tiny", **settings)
    assert not (tmp_path / "s").exists()


def test_every_key_of_a_sweep_file_is_a_setting_of_run_sweep():
    import inspect

    settings = set(inspect.signature(run_sweep).parameters)
    assert sweeps.FILE_KEYS - {"space", "overrides", "points"} <= settings


def test_a_report_of_a_folder_without_a_sweep_is_refused(tmp_path):
    with pytest.raises(AlilamaError, match="holds no sweep"):
        run_sweep(tmp_path, report_only=True)
