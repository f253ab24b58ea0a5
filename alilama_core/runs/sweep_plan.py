"""A sweep's plan from what a user gives: a sweep YAML, overrides and settings, every trial's config checked.

``plan_from_args`` reads the words of a command line (``alilama sweep``'s, or a list in Python), and
``make_plan`` checks the result: every mistake is said here, before Ray starts and before anything is
written. A trial trains as ``alilama train`` would with ``train_args``; ``trial_config`` is its config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.engine.configs import resolve_config
from alilama_core.runs import sweeps
from alilama_core.runs.sweeps import PRESET, Plan, Trial

SCHEDULERS = ("fifo", "asha")


def shared_logger_overrides(name: str, folder: str | Path, study: str) -> list[str]:
    """The overrides that log a run into the one experiment of logger ``name`` that every run of a study
    shares (its ``Logger.shared_options``), to compare them side by side::

        >>> shared_logger_overrides("tensorboard", "/runs/study", "positional")
        ['train.loggers=[tensorboard]', 'train.logger_options.tensorboard.dir=/runs/study/tensorboard']

    An unknown logger raises ``UnknownPluginError`` (listing the registered ones); one with no shared
    experiment ``ConfigError``."""
    from alilama_core.contracts.logger import logger_class
    from alilama_core.engine.registry import get_registry

    options = logger_class(get_registry().get("logger", name), name).shared_options(str(folder), study)
    if options is None:
        raise ConfigError(f"logger {name!r} cannot log a study's runs into one experiment; choose another --logger")
    return [f"train.loggers=[{name}]"] + [f"train.logger_options.{name}.{k}={v}" for k, v in options.items()]


def plan_from_args(args: Sequence[str], **given: Any) -> Plan:
    """The sweep a command line asks for: at most one sweep YAML, then overrides, then the options given
    (``None``: the file's or the default). The command line has the last word on a field the file names: a
    comma list sweeps it over those values, one value narrows the file's sweep to that value (``task.name=copy``
    runs the file's study for one task), each in the field's place in the file's space."""
    files = [a for a in args if "=" not in a]
    if len(files) > 1:
        raise ConfigError(f"give at most one sweep YAML; got {', '.join(files)}")
    file = sweeps.read_sweep_file(files[0]) if files else {}
    fixed, space = sweeps.split_overrides([a for a in args if "=" in a])
    file_space = dict(file.get("space", {}))
    for override in list(fixed):
        key, _, value = override.partition("=")
        if key in file_space:
            file_space[key] = [value]
            fixed.remove(override)
    file_fixed = [o for o in file.get("overrides", []) if o.partition("=")[0].strip() not in space]
    settings = {k: v for k, v in file.items() if k not in ("space", "overrides")}
    settings.update({k: v for k, v in given.items() if v is not None})
    return make_plan(settings, [*file_fixed, *fixed], {**file_space, **space})


def make_plan(settings: dict[str, Any], overrides: list[str], space: dict[str, list[str]]) -> Plan:
    """The sweep from its settings; every trial's config is built and checked here, before Ray starts."""
    plan = Plan(**{k: v for k, v in settings.items() if v is not None}, overrides=overrides, space=space)
    both = [o.partition("=")[0].strip().lstrip("-") for o in overrides]
    both = sorted(set(both) & set(space))
    if both:
        raise ConfigError(
            f"{', '.join(both)} is both swept (a list of values) and set for every trial; give it one or the other"
        )
    sweeps.check_points(plan.points, space)
    if plan.config and (plan.preset or PRESET in space or any(PRESET in p for p in plan.points.values())):
        raise ConfigError("give either --config (config:) or --preset (preset:), not both")
    for key in ("config", "data"):  # trials run in other processes and folders: absolute paths
        if getattr(plan, key):
            setattr(plan, key, str(Path(getattr(plan, key)).resolve()))
    for i, arg in enumerate(plan.score[:-1]):  # the scoring step runs in the trial's worker: absolute paths
        if arg == "--data" and Path(plan.score[i + 1]).exists():
            plan.score[i + 1] = str(Path(plan.score[i + 1]).resolve())
    if plan.data and plan.task:
        raise ConfigError("--data and --task exclude each other: a task run trains on generated examples")
    is_task = bool(plan.task) or "task.name" in space or any(o.startswith("task.name=") for o in overrides)
    if not plan.data and not is_task:
        raise ConfigError("give --data DIR (a folder written by `alilama data prepare`), or --task NAME")
    if plan.metric is None:
        plan.metric = "val_exact" if is_task else "val_bpb"
    if plan.mode is None:
        higher = plan.metric in ("val_exact", "val_token_accuracy") or plan.metric.startswith(("exact@", "token_acc@"))
        plan.mode = "max" if higher else "min"
    if plan.mode not in ("min", "max"):
        raise ConfigError(f"--mode must be min or max, not {plan.mode!r}")
    if (plan.scheduler or "fifo") not in SCHEDULERS:
        raise ConfigError(f"unknown scheduler {plan.scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
    if plan.score and (plan.scheduler or "fifo") != "fifo" and "@" in plan.metric:
        raise ConfigError(
            f"--scheduler {plan.scheduler} stops trials by the evaluations training logs, and {plan.metric} is "
            "known only after the scoring step; rank by a training metric (val_bpb, val_exact) or use fifo"
        )
    if plan.data:
        from alilama_core.runs.data import TokenData

        TokenData(plan.data)  # a missing or foreign data folder is said now, not in every trial
    if plan.task:
        from alilama_core.runs.tasks import get_task

        get_task(plan.task)  # an unknown task names the ones there are
    tracker_args(plan, Path("."))  # an unknown logger is said now
    plan.trials = sweeps.expand(plan.space, plan.search, plan.samples, plan.seed)
    if plan.search == "optuna":
        _check_optuna()
    for trial in plan.trials or corners(plan.space):
        try:
            check_trial(plan, trial_config(plan, trial))
        except AlilamaError as exc:
            raise ConfigError(f"trial {' '.join(trial.args()) or '(no overrides)'}: {exc}") from None
    return plan


def check_trial(plan: Plan, cfg) -> None:
    """What a trial trains on, said before Ray starts: its task by a registered name, else --data."""
    if cfg.task.name:
        from alilama_core.runs.tasks import get_task

        get_task(cfg.task.name)  # an unknown task names the ones there are
    elif not plan.data and not plan.task:
        raise ConfigError("it trains on no task (task.name is empty) and no --data; give one of them")


def corners(space: dict[str, Any]) -> list[Trial]:
    """Points that stand for a space whose trials are not known yet (optuna): each field's first and last value."""
    ends = [
        {k: (sweeps.format_value(v[next(iter(v))][i]) if sweeps.is_range(v) else v[i]) for k, v in space.items()}
        for i in (0, -1)
    ]
    return [Trial(sweeps.trial_name(p), p) for p in ends]


def _check_optuna() -> None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError("--search optuna needs Optuna beside Ray Tune: pip install optuna") from None


def tracker_args(plan: Plan, folder: Path) -> list[str]:
    """The overrides that log every trial into one experiment of ``plan.logger`` (named after the sweep)."""
    if not plan.logger:
        return []
    try:
        return shared_logger_overrides(plan.logger, folder.resolve(), f"sweep-{folder.resolve().name}")
    except AlilamaError as exc:
        raise ConfigError(f"--logger: {exc}") from None


def train_args(plan: Plan, trial: Trial, out: Path | str) -> list[str]:
    """The ``alilama train`` arguments that train this trial on its own (a swept ``preset`` is its --preset)."""
    args = []
    settings = {o: getattr(plan, o) for o in ("preset", "config", "data", "task")}
    settings["preset"] = plan.fields(trial).get(PRESET, settings["preset"])
    for option, value in settings.items():
        if value:
            args += [f"--{option}", value]
    return [*args, "--out", str(out), *plan.overrides, *field_args(plan, trial)]


def field_args(plan: Plan, trial: Trial) -> list[str]:
    """A trial's overrides of config fields, after the sweep's own (a named point's fields in its place; its
    ``preset`` is an option of train, not an override)."""
    return [f"{k}={v}" for k, v in plan.fields(trial).items() if k != PRESET]


def trial_config(plan: Plan, trial: Trial):
    """The config a trial trains with, built and checked as `alilama train` does."""
    preset = plan.fields(trial).get(PRESET, plan.preset)
    return resolve_config(plan.config, preset, [*plan.overrides, *field_args(plan, trial)])
