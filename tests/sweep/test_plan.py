"""A sweep's plan without Ray: comma lists, sweep files, the trials a space expands to."""

from __future__ import annotations

from pathlib import Path

import pytest

from alilama_core.runs.sweep_plan import make_plan, plan_from_args
from alilama_core.base.errors import ConfigError
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


def test_the_tasks_study_file_is_scored_at_n_2n_4n_and_ranked_by_a_score_column():
    file = sweeps.read_sweep_file(ROOT / "configs" / "sweeps" / "tasks.yaml")
    settings = {k: v for k, v in file.items() if k not in ("space", "overrides")}
    plan = make_plan(settings, file["overrides"], file["space"])
    assert len(plan.trials) == 60 and plan.metric == "exact@16" and plan.mode == "max"
    assert plan.score == ["--lengths", "8,16,32", "--examples", "256", "--seed", "0"]
    assert {t.overrides["task.name"] for t in plan.trials} == {"copy", "reverse", "sort", "addition", "parity"}


def test_the_command_line_narrows_or_widens_what_the_file_sweeps_or_sets():
    """``task.name=copy`` runs the file's study for one task (the field keeps its place, so the trials are the
    full study's trials of that task, names included); a list on the command line sweeps a field the file sets."""
    tasks = str(ROOT / "configs" / "sweeps" / "tasks.yaml")
    full = plan_from_args([tasks])
    one = plan_from_args([tasks, "task.name=copy", "train.seed=0"])
    assert list(one.space) == list(full.space) and one.space["task.name"] == ["copy"]
    assert one.space["train.seed"] == ["0"] and one.overrides == full.overrides
    assert [t.name for t in one.trials] == [
        t.name for t in full.trials if t.overrides["task.name"] == "copy" and t.overrides["train.seed"] == "0"
    ]
    wider = plan_from_args([tasks, "train.max_steps=500,1000"])
    assert wider.space["train.max_steps"] == ["500", "1000"] and len(wider.trials) == 2 * len(full.trials)
    assert not any(o.startswith("train.max_steps=") for o in wider.overrides)
    with pytest.raises(ConfigError, match="swept twice"):
        plan_from_args([tasks, "task.name=copy,sort", "task.name=reverse,sort"])


def test_a_scoring_step_that_sets_what_the_sweep_sets_is_refused():
    with pytest.raises(ConfigError, match="--json"):
        sweeps.score_args("--lengths 8 --json")
    with pytest.raises(ConfigError, match="eval` arguments"):
        sweeps.score_args({"lengths": 8})
    assert sweeps.score_columns([{"file": "a/valid.txt", "context_length": 128, "bpb": 1.5}]) == {"bpb@128": 1.5}
    two = [{"file": "a.txt", "context_length": 64, "bpb": 2.0}, {"file": "b.txt", "context_length": 64, "bpb": 1.0}]
    assert sweeps.score_columns(two) == {"a:bpb@64": 2.0, "b:bpb@64": 1.0}


def test_the_horizons_file_sweeps_the_preset_itself(sweep_data):
    """``preset`` in the space trains each trial from that preset: fast's recipe, the essay's, the same rest."""
    from alilama_core.runs.sweep_plan import train_args, trial_config

    file = sweeps.read_sweep_file(ROOT / "configs" / "sweeps" / "horizons.yaml")
    settings = {k: v for k, v in file.items() if k not in ("space", "overrides")}
    plan = make_plan({**settings, "data": str(sweep_data)}, file["overrides"], file["space"])
    assert len(plan.trials) == 24
    fast = next(t for t in plan.trials if t.overrides["preset"] == "fast")
    essay = next(t for t in plan.trials if t.overrides["preset"] == "essay")
    assert trial_config(plan, fast).train.optimizer == "muon" and trial_config(plan, essay).train.optimizer == "adamw"
    assert trial_config(plan, fast).train.warmup_steps == 25  # the file's overrides on top of the preset
    args = train_args(plan, fast, "out")
    assert args[args.index("--preset") + 1] == "fast" and not any(a.startswith("preset=") for a in args)
    with pytest.raises(Exception, match="not both"):
        make_plan({"config": str(ROOT / "configs" / "essay.yaml"), "data": str(sweep_data)}, [], file["space"])


def test_named_points_are_trials_that_are_not_a_product_of_fields(sweep_data):
    """``points:`` are swept as the ``point`` field: each trial trains with its point's overrides after the sweep's
    own (a point may set the preset), the space's other fields multiply them, and the command line narrows them."""
    from alilama_core.runs.sweep_plan import train_args, trial_config

    stage1 = str(ROOT / "configs" / "sweeps" / "recipe-stage1.yaml")
    plan = plan_from_args([stage1], data=str(sweep_data))
    assert list(plan.space) == ["point", "train.seed"]  # the points first: the table's first column
    assert [t.overrides["point"] for t in plan.trials] == list(plan.points) and len(plan.trials) == 5
    muon = next(t for t in plan.trials if t.overrides["point"] == "muon-0.04-wsd")
    assert plan.fields(muon) == {
        "train.optimizer": "muon",
        "train.muon_lr": "0.04",
        "train.schedule": "wsd",
        "train.seed": "0",
    }
    cfg = trial_config(plan, muon)
    assert (cfg.train.optimizer, cfg.train.muon_lr, cfg.train.schedule, cfg.train.eval_tokens) == (
        "muon",
        0.04,
        "wsd",
        0,
    )
    args = train_args(plan, muon, "out")
    assert args[-4:] == ["train.optimizer=muon", "train.muon_lr=0.04", "train.schedule=wsd", "train.seed=0"]
    assert not any(a.startswith("point=") for a in args)
    essay = next(t for t in plan.trials if t.overrides["point"] == "essay")
    assert trial_config(plan, essay).train.optimizer == "adamw" and trial_config(plan, essay).train.schedule == "cosine"

    narrowed = plan_from_args([stage1, "point=muon-0.02-wsd,essay", "train.seed=0,1"], data=str(sweep_data))
    assert [(t.overrides["point"], t.overrides["train.seed"]) for t in narrowed.trials] == [
        ("muon-0.02-wsd", "0"),
        ("muon-0.02-wsd", "1"),
        ("essay", "0"),
        ("essay", "1"),
    ]
    assert narrowed.trials[0].name == next(t.name for t in plan.trials if t.overrides["point"] == "muon-0.02-wsd")
    header, rows = sweeps.seed_table_rows(narrowed)
    assert header[:2] == ["point", "seeds"] and [r[0] for r in rows] == ["muon-0.02-wsd", "essay"]

    stage2 = plan_from_args([str(ROOT / "configs" / "sweeps" / "recipe-stage2.yaml")], data=str(sweep_data))
    assert len(stage2.trials) == 5
    for t in stage2.trials:  # every change from stage 1's best, and only that change
        cfg = trial_config(stage2, t)
        assert (cfg.train.optimizer, cfg.train.muon_lr, cfg.train.schedule) == ("muon", 0.02, "wsd")
    changed = {t.overrides["point"]: trial_config(stage2, t) for t in stage2.trials}
    assert changed["qk-norm"].model.qk_norm and not changed["base"].model.qk_norm
    assert (changed["adamw-lr-0.006"].train.lr, changed["adamw-lr-0.006"].train.min_lr) == (0.006, 0.0006)

    preset = make_plan(
        {"data": str(sweep_data), "points": {"a": {"preset": "fast"}, "b": {}}, "preset": "essay"},
        [],
        {"point": ["a", "b"]},
    )
    a, b = preset.trials
    assert trial_config(preset, a).train.optimizer == "muon" and trial_config(preset, b).train.optimizer == "adamw"
    assert train_args(preset, a, "out")[:2] == ["--preset", "fast"]


def test_the_recipe_file_is_an_optuna_study_over_ranges(sweep_data):
    pytest.importorskip("optuna", reason="--search optuna needs Optuna")
    file = sweeps.read_sweep_file(ROOT / "configs" / "sweeps" / "recipe.yaml")
    settings = {k: v for k, v in file.items() if k not in ("space", "overrides")}
    plan = make_plan({**settings, "data": str(sweep_data)}, file["overrides"], file["space"])
    assert plan.search == "optuna" and plan.samples == 24 and plan.trials == []  # Optuna chooses them
    assert plan.space["train.lr"] == {"loguniform": [0.001, 0.01]}
    assert plan.space["model.qk_norm"] == ["false", "true"]
    with pytest.raises(ConfigError, match="grid cannot enumerate"):
        sweeps.expand(plan.space, "grid")
    drawn = sweeps.expand(plan.space, "random", 5, seed=2)
    assert drawn == sweeps.expand(plan.space, "random", 5, seed=2) and len(drawn) == 5
    assert all(0.001 <= float(t.overrides["train.lr"]) <= 0.01 for t in drawn)


def test_ranges_on_the_command_line_and_their_mistakes():
    fixed, space = sweeps.split_overrides(["train.lr=loguniform(1e-4, 1e-2)", "train.warmup_steps=randint(5,50)"])
    assert fixed == [] and space == {
        "train.lr": {"loguniform": [1e-4, 1e-2]},
        "train.warmup_steps": {"randint": [5, 50]},
    }
    for bad, phrase in [
        ("train.lr=loguniform(0,1)", "0 < low < high"),
        ("train.lr=uniform(2,1)", "low < high"),
        ("train.warmup_steps=randint(1.5,4)", "two integers"),
    ]:
        with pytest.raises(ConfigError, match=phrase):
            sweeps.split_overrides([bad])


def test_asha_never_stops_a_trial_on_its_last_evaluation(sweep_data):
    """The trainer ends a trial at train.max_steps; had ASHA stopped it on the evaluation logged at that step,
    the trainer would be killed between that row of metrics and its final weights."""
    pytest.importorskip("ray.tune", reason="the scheduler is Ray Tune's")
    from ray.tune.experiment import Trial as TuneTrial
    from ray.tune.schedulers import TrialScheduler

    from alilama_core.runs.sweep_ray import scheduler_settings

    overrides = ["train.max_steps=60", "train.eval_every=10"]
    plan = make_plan(
        {"preset": "tiny", "data": str(sweep_data), "scheduler": "asha"}, overrides, {"train.lr": ["1e-3"]}
    )
    asha = scheduler_settings(plan)["scheduler"]
    asha.set_search_properties(plan.metric, plan.mode)
    trial = TuneTrial("run_trial", config={}, stub=True)
    asha.on_trial_add(None, trial)
    actions = [asha.on_trial_result(None, trial, {"step": s, plan.metric: 2.0}) for s in (10, 20, 30, 40, 50, 60)]
    assert actions == [TrialScheduler.CONTINUE] * 6


def test_the_table_over_seeds_groups_the_other_fields_in_the_space_order():
    space = {"task.name": ["copy", "sort"], "model.positional": ["alibi", "learned"], "train.seed": ["0", "1"]}
    plan = sweeps.Plan(space=space, metric="exact@16", mode="max", trials=sweeps.expand(space))
    for i, t in enumerate(plan.trials):
        t.status = sweeps.DONE
        t.scores = {"exact@8": 0.5 + i / 100}
        if t.overrides["model.positional"] != "learned":  # no positions at 16 for the learned table: n/a
            t.metric = t.scores["exact@16"] = i / 10
    plan.trials[-1].status = sweeps.FAILED  # sort/learned/seed 1 never finished: one seed counted
    header, rows = sweeps.table_rows(plan)  # the table of trials: n/a where a finished trial has no value
    by_trial = {row[-1]: dict(zip(header, row)) for row in rows}
    assert by_trial[plan.trials[-2].name]["exact@16"] == "n/a"  # done, learned
    assert by_trial[plan.trials[-1].name]["exact@16"] == ""  # failed: not known
    assert by_trial[plan.trials[0].name]["exact@16"] == "0.0000"
    header, rows = sweeps.seed_table_rows(plan)
    assert header == ["task.name", "model.positional", "seeds", "exact@16", "exact@8"]
    assert [r[:3] for r in rows] == [["copy", "alibi", "2"], ["copy", "learned", "2"], ["sort", "alibi", "2"],
                                     ["sort", "learned", "1"]]  # fmt: skip
    assert rows[0][3:] == ["0.0500 (0.0000–0.1000)", "0.5050 (0.5000–0.5100)"]
    assert rows[1][3] == "n/a" and rows[3][4] == "0.5600 (0.5600–0.5600)"
    assert "| sort | learned | 1 | n/a |" in sweeps.as_markdown(header, rows)
    assert sweeps.seed_table_rows(sweeps.Plan(space={"train.lr": ["1e-3", "3e-3"]}, metric="val_bpb")) is None
