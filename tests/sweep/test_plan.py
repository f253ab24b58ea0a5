"""A sweep's plan without Ray: comma lists, sweep files, the trials a space expands to."""

from __future__ import annotations

from pathlib import Path

import pytest

from alilama_core.app.sweep import make_plan
from alilama_core.contracts.errors import ConfigError
from alilama_core.runs import sweeps

ROOT = Path(__file__).resolve().parents[2]


def test_commas_inside_brackets_and_quotes_do_not_split():
    fixed, space = sweeps.split_overrides(
        ["train.loggers=[csv, tensorboard]", "model.positional=alibi,rope", "train.seed=0,1,2", "task.name='a,b'"]
    )
    assert fixed == ["train.loggers=[csv, tensorboard]", "task.name='a,b'"]
    assert space == {"model.positional": ["alibi", "rope"], "train.seed": ["0", "1", "2"]}
    with pytest.raises(ConfigError, match="empty value"):
        sweeps.split_overrides(["train.seed=0,"])


def test_trial_names_are_stable_and_distinct():
    trials = sweeps.expand({"model.positional": ["alibi", "rope"], "train.lr": ["1e-3", "0.001"]})
    assert len({t.name for t in trials}) == 4
    assert trials[0].name == sweeps.trial_name({"model.positional": "alibi", "train.lr": "1e-3"})
    assert trials[0].name.startswith("positional-alibi_lr-1e-3-")
    again = sweeps.expand({"train.seed": ["0", "1", "2", "3"]}, "random", 2, seed=5)
    assert again == sweeps.expand({"train.seed": ["0", "1", "2", "3"]}, "random", 2, seed=5)
    with pytest.raises(ConfigError, match="samples"):
        sweeps.expand({"train.seed": ["0", "1"]}, "random")


def test_the_positional_study_file_is_a_12_trial_grid_of_valid_configs(sweep_data):
    file = sweeps.read_sweep_file(ROOT / "configs" / "sweeps" / "positional.yaml")
    settings = {k: v for k, v in file.items() if k not in ("space", "overrides")}
    plan = make_plan({**settings, "data": str(sweep_data)}, file["overrides"], file["space"])
    assert len(plan.trials) == 12 and plan.metric == "val_bpb" and plan.mode == "min"
    assert "train.sample_prompts=[]" in plan.overrides
    assert {t.overrides["model.positional"] for t in plan.trials} == {"alibi", "rope", "learned", "nope"}
