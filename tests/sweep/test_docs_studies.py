"""The studies of docs/training.md are sweeps: each table on the page is ``alilama sweep``'s own table, rendered
from the sweep's committed record (docs/figures/NAME-sweep/sweep.json), and that record is the sweep file with
the overrides the page's command adds. (docs/tasks.md's study: tests/tasks/test_study.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from alilama_testing import documented_sweep

from alilama_core.runs.sweep_plan import plan_from_args
from alilama_core.runs import sweeps

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")

STUDIES = {  # name: the table it shows (results.md or, over seeds, results-seeds.md)
    "positional": "results",
    "recipe-stage1": "results",
    "recipe-stage2": "results",
    "horizons": "results-seeds",
}


def block(name: str) -> str:
    begin, end = f"<!-- {name}-sweep:begin -->", f"<!-- {name}-sweep:end -->"
    return PAGE[PAGE.index(begin) + len(begin) : PAGE.index(end)]


def recorded(name: str) -> sweeps.Plan:
    plan = sweeps.read_plan(ROOT / "docs" / "figures" / f"{name}-sweep")
    assert plan is not None
    return plan


@pytest.mark.parametrize("name", STUDIES)
def test_the_page_shows_the_sweeps_own_table_from_its_record(name):
    plan = recorded(name)
    if STUDIES[name] == "results":
        expected = sweeps.table_markdown(plan)
    else:
        expected = sweeps.as_markdown(*sweeps.seed_table_rows(plan))
    assert block(name).strip() == expected.strip()
    assert all(t.status == sweeps.DONE and t.metric is not None for t in plan.trials)


@pytest.mark.parametrize("name", STUDIES)
def test_the_record_is_the_sweep_the_pages_command_asks_for(name, sweep_data):
    """Built from the page's command as ``alilama sweep`` builds it, on other data (the record's data folder is
    a path on the machine that ran it): the same overrides, space, search and trials."""
    args, words = documented_sweep(PAGE, f"configs/sweeps/{name}.yaml")
    assert "--data" in args and "--out" in args
    asked = plan_from_args(words, data=str(sweep_data))
    plan = recorded(name)
    same = [k for k in sweeps.IDENTITY if k != "data"]
    assert {k: getattr(plan, k) for k in same} == {k: getattr(asked, k) for k in same}
    assert [t.name for t in plan.trials] == [t.name for t in asked.trials]
