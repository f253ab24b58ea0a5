"""A third party's logger (tests/plugins/alilama-ledger, not part of Alilama): it passes the
conformance kit, and ``alilama train ... train.loggers=[ledger]`` drives it through the CLI, on a
whole run, with its own option, and across a SIGKILL and ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alilama_testing import TINY_TRAIN, killed_and_resumed, needs_test_plugins, ok, run_cli

from alilama_core.kit import check_logger

pytestmark = needs_test_plugins("alilama-ledger")


def ledger(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scalar_steps(path: Path) -> list[int]:
    return [e["step"] for e in ledger(path) if e["call"] == "scalars"]


def read_steps(run_dir: Path, state: dict) -> list[int]:
    return scalar_steps(Path(state["dir"]) / "ledger.jsonl")


def test_ledger_passes_the_kit():
    assert len(check_logger("ledger", read_steps=read_steps)) == 5


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("ledger")
    write_corpus(root / "train.txt", 300, seed=1)
    ok(run_cli("tokenizer", "train", "-i", str(root / "train.txt"), "-v", "300", "-o", str(root / "tok")))
    ok(
        run_cli(
            "data", "prepare", "-i", str(root / "train.txt"), "--tokenizer", str(root / "tok"), "-o", str(root / "data")
        )
    )
    return root / "data"


def test_train_logs_to_the_ledger_through_the_cli(data_dir, tmp_path):
    run = tmp_path / "run"
    args = ["train", "--data", str(data_dir), "--out", str(run), *TINY_TRAIN, "train.max_steps=6"]
    ok(run_cli(*args, "train.loggers=[ledger]", "train.logger_options.ledger.label=mine"))
    entries = ledger(run / "trackers" / "ledger" / "ledger.jsonl")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert entries[0]["call"] == "start" and entries[0]["parameters"] > 1000 and entries[0]["label"] == "mine"
    assert scalar_steps(run / "trackers" / "ledger" / "ledger.jsonl") == [r["step"] for r in rows]
    assert [e["values"]["train_loss"] for e in entries if e["call"] == "scalars"] == [r["train_loss"] for r in rows]
    assert [e["step"] for e in entries if e["call"] == "evaluation"] == [4, 6]
    assert entries[-1]["call"] == "end" and entries[-1]["stopped"] is None and entries[-1]["summary"]["step"] == 6
    kept = json.loads((run / "run.json").read_text())["loggers"]
    assert kept == {"ledger": {"dir": str(run / "trackers" / "ledger")}}


def test_killed_and_resumed_ledger_holds_each_step_once(data_dir, tmp_path):
    run = tmp_path / "killed"
    killed_and_resumed(
        ["train", "--data", str(data_dir), *TINY_TRAIN, "train.max_steps=14", "train.loggers=[ledger]"], run
    )
    path = run / "trackers" / "ledger" / "ledger.jsonl"
    assert scalar_steps(path) == list(range(1, 15))
    starts = [e for e in ledger(path) if e["call"] == "start"]
    assert len(starts) == 2 and starts[1]["resumed_from"] is not None and starts[1]["resumed_from"] % 2 == 0


@needs_test_plugins("alilama-scratch")
def test_a_third_party_trainer_logs_the_same_way(data_dir, tmp_path):
    """The ``scratch`` trainer (written from the contracts, no subclass of the default one) writes
    through ``RunFolder``, so the loggers get its rows with no code of its own for them."""
    run = tmp_path / "scratch"
    args = ["train", "--data", str(data_dir), "--out", str(run), "--preset", "tiny", "--no-progress"]
    args += ["model.vocab_size=300", "train.trainer=scratch", "train.max_steps=6", "train.eval_every=3"]
    ok(run_cli(*args, "train.checkpoint_every=3", "train.batch_size=4", "train.loggers=[ledger, csv]"))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert scalar_steps(run / "trackers" / "ledger" / "ledger.jsonl") == [r["step"] for r in rows] == list(range(1, 7))
    metrics_csv = (run / "trackers" / "csv" / "metrics.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in metrics_csv if ",val_loss," in line] == ["3", "6"]
    assert ledger(run / "trackers" / "ledger" / "ledger.jsonl")[-1]["call"] == "end"
