"""The length-generalisation study of docs/tasks.md is a sweep: the page's table is ``alilama sweep``'s own table
over seeds, rendered from the sweep's record (docs/figures/tasks-sweep/sweep.json); that record is the sweep the
page's command asks for; and the sweep run again for one task lands within the study's seed noise."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from alilama_testing import documented_sweep, run_cli

from alilama_core.runs.sweep_plan import plan_from_args
from alilama_core.runs import sweeps

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
RECORD = ROOT / "docs" / "figures" / "tasks-sweep"
BEGIN, END = "<!-- study:begin -->", "<!-- study:end -->"
COLUMNS = ["exact@16", "exact@8", "token_acc@8", "token_acc@16", "exact@32", "token_acc@32"]


def recorded() -> sweeps.Plan:
    plan = sweeps.read_plan(RECORD)
    assert plan is not None, f"{RECORD} holds no sweep.json"
    return plan


def test_the_page_shows_the_sweeps_table_over_seeds_from_its_record():
    block = PAGE[PAGE.index(BEGIN) + len(BEGIN) : PAGE.index(END)]
    header, rows = sweeps.seed_table_rows(recorded())
    assert block.strip() == sweeps.as_markdown(header, rows).strip()
    assert header == ["task.name", "model.positional", "seeds", *COLUMNS]
    assert len(rows) == 25 and all(row[2] == "3" for row in rows)  # every cell has its three seeds


def test_the_record_is_the_sweep_the_pages_command_asks_for():
    study = PAGE[PAGE.index("## The study") : PAGE.index(BEGIN)]
    args, words = documented_sweep(study, "configs/sweeps/tasks.yaml")
    assert "--out" in args
    asked = plan_from_args(words)
    plan = recorded()
    assert plan.identity() == asked.identity()
    assert plan.score == asked.score and plan.metric == "exact@16"
    assert [t.name for t in plan.trials] == [t.name for t in asked.trials]
    for trial in plan.trials:
        assert trial.status == sweeps.DONE, trial.name
        learned = trial.overrides["model.positional"] == "learned"  # no positions past its table of 8 + answer
        assert set(trial.scores) | {"exact@16"} == set(COLUMNS) or learned, trial.name
        assert trial.metric == trial.scores.get("exact@16"), trial.name


def test_the_figure_is_the_sweeps_plot_of_its_record(tmp_path):
    from matplotlib.image import imread

    from alilama_core.runs.sweep_plot import plot_sweep

    assert "](img/tasks-study.png)" in PAGE[PAGE.index(END) :]
    drawn = plot_sweep(recorded(), tmp_path / "results.png")
    assert (imread(drawn) == imread(ROOT / "docs" / "img" / "tasks-study.png")).all()


def cell_range(row: list[str], column: int) -> tuple[float, float] | None:
    found = re.fullmatch(r"([\d.]+) \(([\d.]+)–([\d.]+)\)", row[column])
    return None if found is None else (float(found[2]), float(found[3]))


@pytest.mark.slow
def test_one_task_again_lands_within_the_seed_noise_of_the_table(tmp_path, monkeypatch):
    """``task.name=copy train.seed=0``: the page's sweep for one task and one seed (4 trials) reproduces the
    table's copy rows: every score within the range of the study's three seeds, widened by that range's width
    (at least 5 points) for a machine whose arithmetic differs."""
    pytest.importorskip("ray.tune", reason="alilama sweep needs the sweep extra (ray[tune])")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "copy"
    args = ["sweep", str(ROOT / "configs" / "sweeps" / "tasks.yaml"), "--out", str(out), "--num-cpus", "2"]
    result = run_cli(*args, "--max-concurrent", "2", "task.name=copy", "train.seed=0", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    again = json.loads((out / "sweep.json").read_text())
    header, rows = sweeps.seed_table_rows(recorded())
    table = {row[1]: row for row in rows if row[0] == "copy"}
    assert len(again["trials"]) == 4
    for trial in again["trials"]:
        row = table[trial["overrides"]["model.positional"]]
        for column, value in trial["scores"].items():
            low, high = cell_range(row, header.index(column))
            slack = max(0.05, high - low)
            assert low - slack <= value <= high + slack, (trial["name"], column, value, row)
