"""The example at the top of docs/tasks.md: what the page says it reached is what scripts/check_tasks_example.py
measured, its commands are ones the CLI accepts, and its prose claims no more than the measurement shows.

Fast: nothing is trained here. The measurement itself is the script's
(``nice .venv/bin/python scripts/check_tasks_example.py``, a few minutes), kept
in docs/figures/tasks_example.json.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest

from alilama_core.engine import configs as cfgmod
from alilama_core.runs import sweeps

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load("check_tasks_example")
STUDY = sweeps.read_sweep_file(ROOT / "configs" / "sweeps" / "tasks.yaml")["overrides"]

PAGE = example.DOC.read_text(encoding="utf-8")
RESULTS = json.loads(example.RESULTS.read_text(encoding="utf-8"))
COMMANDS = example.commands(example.example_block(PAGE))
CLAIM = re.compile(r"reached (?:at least )?(\d+(?:\.\d+)?)% exact match at length (\d+)")


def result_block() -> str:
    return PAGE[PAGE.index(example.RESULT_BEGIN) : PAGE.index(example.RESULT_END) + len(example.RESULT_END)]


def prose() -> str:
    """The page's own words about the example: from the top to the first heading after the result block."""
    after = PAGE.index(example.RESULT_END) + len(example.RESULT_END)
    heading = PAGE.index("\n## ", after)
    return PAGE[: PAGE.index(example.BEGIN)] + PAGE[after:heading]


def rendered_exact(block: str) -> dict[tuple[str, int], float]:
    """(run, length) -> exact match in percent, read back from the rendered table."""
    found, run = {}, None
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or not re.match(r"\d+", cells[4]):
            continue
        run = cells[0].strip("`") or run
        found[(run, int(cells[4].split()[0]))] = float(cells[5].rstrip("%"))
    return found


# -- (a) the page shows what the script renders from its saved results --------------------------


def test_result_block_is_what_the_script_renders_from_its_json():
    assert result_block() == example.render(RESULTS)


def test_the_saved_results_come_from_the_block_as_it_stands():
    assert RESULTS["commands"] == [shlex.join(["alilama", *args]) for args in COMMANDS]
    assert [r["run"] for r in RESULTS["runs"]] == [example.run_created(a) for a in COMMANDS if example.run_created(a)]
    for run in RESULTS["runs"]:
        assert run["rows"], f"{run['run']} was never evaluated"


# -- (b) every command is one the real CLI accepts ----------------------------------------------


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_command_parses_against_the_cli(args):
    example.parse(args)


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--task", "sort", "--out", "runs/x", "--thread", "1"],
        ["train", "--task", "sort", "--out", "runs/x", "model.dmodel=64"],
        ["train", "--task", "sorting", "--out", "runs/x"],
        ["eval", "runs/x", "--length", "8"],
        ["plot", "runs/x", "--accuracies"],
        ["viz", "attention", "runs/x", "--promt", "1=1"],
        ["visualise", "attention", "runs/x"],
    ],
)
def test_a_wrong_command_or_option_is_refused(args):
    with pytest.raises(example.CommandError):
        example.parse(args)


def test_every_run_the_block_reads_it_creates_first():
    created: list[str] = []
    for args in COMMANDS:
        for run in example.runs_read(args):
            assert run in created, f"`alilama {shlex.join(args)}` reads {run}, which no earlier train command creates"
        if example.run_created(args):
            created.append(example.run_created(args))
    assert len(created) >= 2


def test_the_example_trains_with_the_study_settings_on_one_thread():
    """The settings that learn sort at length 8 in every run of the study (configs/sweeps/tasks.yaml)."""
    study = cfgmod.apply_overrides(cfgmod.Config(), STUDY)
    trains = [example.parse(a)[1]["built_config"] for a in COMMANDS if example.run_created(a)]
    for cfg in trains:
        assert cfg.task.name == "sort" and cfg.task.lengths == study.task.lengths == "1-8"
        for key in ("d_model", "n_heads", "n_layers", "d_mlp"):  # the study's `auto` picks a backend; any
            assert getattr(cfg.model, key) == getattr(study.model, key), key  # exact one computes the same
        for key in ("batch_size", "lr", "min_lr", "warmup_steps", "max_steps"):
            assert getattr(cfg.train, key) == getattr(study.train, key), key
        assert cfg.train.threads == 1
    assert {cfg.model.positional for cfg in trains} == {"nope", "alibi"}


# -- (c) the prose says no more than the result shows -------------------------------------------


def test_the_prose_claims_no_more_exact_match_than_was_reached():
    claims = CLAIM.findall(prose())
    assert claims, "the prose should state what the example reached (…reached N% exact match at length L…)"
    shown = rendered_exact(result_block())
    for percent, length in claims:
        for run in RESULTS["runs"]:
            rendered = shown[(f"{run['run']}", int(length))]
            saved = next(r["exact_match"] for r in run["rows"] if r["length"] == int(length))
            assert rendered >= float(percent), f"{run['run']} at length {length}: {rendered}% shown"
            assert 100 * saved >= float(percent), f"{run['run']} at length {length}: {100 * saved:.1f}% measured"
    trained = {run["trained_lengths"][1] for run in RESULTS["runs"]}
    assert trained & {int(length) for _, length in claims}, "a claim about the trained length"


def test_the_rendered_table_reads_back():
    shown = rendered_exact(result_block())
    assert len(shown) == sum(len(r["rows"]) for r in RESULTS["runs"])
    for run in RESULTS["runs"]:
        for r in run["rows"]:
            assert shown[(run["run"], r["length"])] == pytest.approx(100 * r["exact_match"], abs=0.05)
