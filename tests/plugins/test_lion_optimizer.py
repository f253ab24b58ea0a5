"""``lion`` (tests/plugins/alilama-lion): an optimizer from a separate package, registered through its entry point,
passes the conformance kit, and through the CLI trains, checkpoints and resumes bit-identically."""

from __future__ import annotations

from alilama_testing import losses, needs_test_plugins, ok
from alilama_testing import run_cli as cli

from alilama_core.engine.registry import get_optimizer, get_registry
from alilama_core.kit import check_optimizer

pytestmark = needs_test_plugins("alilama-lion")

TRAIN = [
    "--task",
    "copy",
    "--preset",
    "tiny",
    "--no-progress",
    "task.lengths=1-4",
    "train.max_steps=8",
    "train.checkpoint_every=100",
    "train.eval_every=100",
    "train.log_every=1",
    "train.device=cpu",
    "train.optimizer=lion",
    "train.lr=1e-3",
    "train.optimizer_options.beta2=0.98",
]


def test_lion_is_registered_through_its_entry_point_and_passes_the_kit():
    from alilama_lion.lion import LionFactory

    entry = get_registry().entry("optimizer", "lion")
    assert (entry.distribution, entry.plugin) == ("alilama-lion", "lion") and get_optimizer("lion") is LionFactory
    assert check_optimizer("lion", options={"beta2": 0.98})[-1] == "unknown options"


def test_train_with_lion_resumes_bit_identically(tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert "done: step 8" in ok(cli("train", *TRAIN, "--out", str(straight)))
    stopped = cli("train", *TRAIN, "--out", str(split), "--stop-at", "4")
    assert stopped.returncode == 130 and "checkpoint written at step 4" in stopped.stdout  # as an interrupted run
    assert max(losses(split)) == 4 and not (split / "final").exists()
    ok(cli("train", "--resume", str(split), "--no-progress"))
    assert losses(split) == losses(straight)  # bit for bit: Lion's momentum came back from the checkpoint
    assert losses(straight)[8] < losses(straight)[1]
    weights = [(run / "final" / "model.safetensors").read_bytes() for run in (straight, split)]
    assert weights[0] == weights[1]
    saved = (split / "config.yaml").read_text()  # what a resume reads back
    assert "optimizer: lion" in saved and "beta2: 0.98" in saved
