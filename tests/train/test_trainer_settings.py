"""What a trainer honours or refuses (``contracts.trainer``), and a kit that fails trainers which ignore a
setting or never write ``final/``; ``alilama train`` does not say "done" for such a run."""

from __future__ import annotations

import copy
import dataclasses
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alilama_core.app.cli import get_app
from alilama_core.contracts.config import TrainConfig
from alilama_core.base.errors import ConfigError
from alilama_core.contracts.trainer import CORE, EVERY_TRAINER, REPORTING, SETTING_NAMES, SETTINGS, Trainer
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.registry import get_trainer
from alilama_core.kit import registered, trainer_checks

REPO = Path(__file__).resolve().parents[2]
DefaultTrainer = get_trainer("default")


def test_every_train_setting_is_placed_once_and_documented():
    placed = [
        *(s.name for s in SETTINGS),
        *(c for s in SETTINGS for c in s.companions),
        *EVERY_TRAINER,
        *CORE,
        *REPORTING,
    ]
    assert sorted(placed) == sorted(f.name for f in dataclasses.fields(TrainConfig))
    doc = (REPO / "docs" / "plugins.md").read_text()
    table = doc[doc.index("### What a trainer honours or refuses") :]
    table = table[: table.index("\n#")]
    for name in placed:
        assert f"`{name}`" in table, f"docs/plugins.md's trainer settings table does not name train.{name}"


class Bare(Trainer):
    """Declares nothing: every setting in use is refused."""

    def fit(self, data_dir, out_dir, resume=False, overwrite=False, stop_at=None):
        return {"step": 0}


def test_a_trainer_refuses_each_setting_in_use_that_it_does_not_declare():
    cfg = cfgmod.apply_overrides(
        cfgmod.preset("tiny"), ["train.grad_clip=null", "train.warmup_steps=0", "train.trainer=bare"]
    )
    Bare(cfg)  # every setting idle: nothing to refuse
    for setting in SETTINGS:
        changed = copy.deepcopy(cfg)
        for key, value in setting.probe.items():
            setattr(changed.train, key, value)
        with pytest.raises(ConfigError, match=rf"trainer 'bare' does not support train\.{setting.name}=") as refused:
            Bare(changed)
        assert setting.idle in str(refused.value)
    both = cfgmod.apply_overrides(cfg, ["train.dtype=bfloat16", "train.compile=true"])
    with pytest.raises(ConfigError) as refused:
        Bare(both)
    assert re.search(
        r"does not support train\.dtype=bfloat16 \(.*\); train\.compile=true \(.*\)\. "
        r"Set train\.dtype=float32; train\.compile=false, or choose a trainer that supports it",
        str(refused.value),
    )
    assert DefaultTrainer.supports == SETTING_NAMES


class IgnoresDtype(DefaultTrainer):
    """Declares bf16 (it inherits the default trainer's supports) but trains in float32 whatever it is asked."""

    def fit(self, *args, **kw):
        self.config.train.dtype = "float32"
        return super().fit(*args, **kw)


class NeverRefuses(DefaultTrainer):
    """Does not declare compile, skips the refusal, and trains without compiling."""

    supports = SETTING_NAMES - {"compile"}

    @classmethod
    def check_settings(cls, train, name=""):
        pass

    def fit(self, *args, **kw):
        self.config.train.compile = False
        return super().fit(*args, **kw)


class NoFinal(DefaultTrainer):
    """Trains, but its run ends without final/ (as a trainer that never calls its RunWriter's finish)."""

    def fit(self, data_dir, out_dir, **kw):
        result = super().fit(data_dir, out_dir, **kw)
        shutil.rmtree(Path(out_dir) / "final", ignore_errors=True)
        return result


@pytest.mark.parametrize(
    "trainer, check, message",
    [
        (
            IgnoresDtype,
            "settings",
            r"train\.dtype='bfloat16' is not honoured: attention's inputs were in \[torch\.float32\]",
        ),
        (
            NeverRefuses,
            "settings",
            r"train\.compile=True was silently ignored: it trained instead of refusing it "
            r"\(it does not declare it in supports\)",
        ),
        (NoFinal, "fit", r"fit\(\) to train\.max_steps wrote no final/model\.safetensors: end fit\(\) with"),
    ],
)
def test_the_kit_fails_a_trainer_that_ignores_a_setting_or_writes_no_final(data_dir, trainer, check, message):
    checks = {c.name: c for c in trainer_checks(trainer, data_dir)}
    with pytest.raises(AssertionError, match=message):
        checks[check]()


def test_train_says_error_not_done_when_the_trainer_wrote_no_final(tmp_path):
    args = ["train", "--task", "copy", "--preset", "tiny", "--no-progress", "--out", str(tmp_path / "run")]
    args += ["task.lengths=1-4", "train.max_steps=2", "train.eval_every=2", "train.trainer=no-final"]
    with registered("trainer", "no-final", NoFinal):
        result = CliRunner().invoke(get_app(), args, catch_exceptions=True)
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "done:" not in said, said
    assert f"error: trainer 'no-final' returned at step 2 without writing {tmp_path / 'run' / 'final'}" in said
    assert "must end fit() with its RunWriter's finish(model, state)" in said
