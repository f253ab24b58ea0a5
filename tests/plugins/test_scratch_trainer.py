"""``scratch`` (tests/plugins/alilama-scratch): a trainer written from the contracts, ``RunWriter`` and ``DataSource``.

It is not a subclass of the default trainer. It passes the conformance kit, and
through the CLI trains on prepared text and on a task, is killed (SIGKILL) mid-run
and resumed to the very weights of an uninterrupted run, then evaluates and exports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alilama_testing import killed_and_resumed, needs_test_plugins, ok
from alilama_testing import run_cli as cli

from alilama_core.kit.trainer import check_trainer

pytestmark = needs_test_plugins("alilama-scratch")

TRAIN = [
    "--preset",
    "tiny",
    "--no-progress",
    "model.context_length=32",
    "train.trainer=scratch",
    "train.max_steps=40",
    "train.checkpoint_every=4",
    "train.eval_every=20",
    "train.eval_tokens=512",
    "train.batch_size=4",
    "train.device=cpu",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.runs.stories import write_corpus
    from alilama_core.engine.registry import get_tokenizer

    root = tmp_path_factory.mktemp("scratch")
    write_corpus(root / "stories.txt", 200, seed=1)
    tok = get_tokenizer("bpe").train(iter_documents([str(root / "stories.txt")]), 300, special_tokens=["<|endoftext|>"])
    tok.save(root / "tok")
    prepare([str(root / "stories.txt")], root / "tok", root / "data", val_fraction=0.1)
    return root / "data"


def weights(run: Path) -> bytes:
    return (run / "final" / "model.safetensors").read_bytes()


def test_the_scratch_trainer_conforms(data):
    from alilama_scratch.trainer import ScratchTrainer
    from alilama_trainers.trainer import DefaultTrainer

    from alilama_core.engine.registry import get_trainer

    assert not issubclass(get_trainer("scratch"), DefaultTrainer) and get_trainer("scratch") is ScratchTrainer
    assert ScratchTrainer.supports == {"optimizer", "grad_clip", "warmup_steps"}  # refuses the other settings
    assert check_trainer("scratch", data) == ["fit", "stop and resume", "trains a task", "bad input", "settings"]


def test_scratch_on_text_killed_and_resumed_is_bit_identical(data, tmp_path):
    args = ["train", "--data", str(data), *TRAIN, "model.vocab_size=300"]
    ok(cli(*args, "--out", str(tmp_path / "straight")))
    run = tmp_path / "run"
    killed_and_resumed(args, run)
    assert weights(run) == weights(tmp_path / "straight")
    record = json.loads((run / "run.json").read_text())
    assert record["data"] == str(data.resolve()) and record["task"] is None
    assert [h["action"] for h in record["history"]] == ["start", "resume"]
    assert record["history"][0]["trainer"] == "scratch"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 41))  # the rows past the resumed checkpoint were dropped, none twice

    rows = json.loads(ok(cli("eval", str(run), "--data", str(data.parent / "stories.txt"), "--json")))
    assert rows and all(r["bpb"] is not None and 0 < r["bpb"] < 20 for r in rows)
    out = tmp_path / "hf"
    ok(cli("export", "hf", str(run), str(out)))
    assert (out / "config.json").is_file()


def test_scratch_on_a_task_killed_and_resumed_is_bit_identical(tmp_path):
    args = ["train", "--task", "copy", *TRAIN, "task.lengths=1-8"]
    ok(cli(*args, "--out", str(tmp_path / "straight")))
    run = tmp_path / "run"
    killed_and_resumed(args, run)
    assert weights(run) == weights(tmp_path / "straight")
    record = json.loads((run / "run.json").read_text())
    assert record["task"] == "copy" and record["data"] is None
    final = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert final["step"] == 40 and "val_exact" in final

    rows = json.loads(ok(cli("eval", str(run), "--lengths", "4,8", "--examples", "16", "--json")))
    assert rows


def test_scratch_refuses_what_it_does_not_support_with_a_clear_error(data, tmp_path):
    run = tmp_path / "run"
    args = [*TRAIN, "model.vocab_size=300", "train.max_steps=null", "train.max_time=30", "train.dtype=bfloat16"]
    result = cli("train", "--data", str(data), *args, "--out", str(run))
    assert result.returncode == 1 and "Traceback" not in result.stderr and not run.exists()
    said = " ".join((result.stdout + result.stderr).split())
    assert "trainer 'scratch' does not support train.dtype=bfloat16 (bf16 autocast" in said
    assert "train.max_time=30" in said and "Set train.dtype=float32; train.max_time=null, with train.max_steps" in said
