"""``alilama sweep``: many runs that differ in a few overrides, on Ray Tune, with the table and the plot.

Each trial is an ordinary run folder under ``SWEEP/trials/``, trained by
``alilama train`` (so by the registry's trainer) in a child process of a Ray
worker, which reports each evaluation to Tune as the run logs it. Ray decides
where and how many at once; a trial whose worker dies is retried by Tune
(``FailureConfig``) and continues from its run folder's last checkpoint.
Running the same sweep again trains only what did not finish.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from alilama_core.app.common import ConfigOpt, PresetOpt, console, examples, plain_line, resolve_config
from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.base.files import exclusive_lock
from alilama_core.runs import sweeps
from alilama_core.runs.sweeps import DONE, FAILED, PENDING, RUNNING, STOPPED, Plan, Trial

SCHEDULERS = ("fifo", "asha")


@examples(
    "alilama sweep --data d/ --out sw model.positional=alibi,rope,learned",
    "alilama sweep configs/sweeps/positional.yaml --data d/ --out sw",
    "alilama sweep sweep.yaml --data d/ --out sw --max-concurrent 2",
    "alilama sweep sweep.yaml --data d/ --out sw --address HEAD:6379",
    # unknown options are overrides too, as for train
    context_settings={"ignore_unknown_options": True},
)
def sweep_cmd(
    args: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="An optional sweep YAML, then overrides: section.field=a,b,c sweeps the field, "
            "section.field=value sets it for every trial."
        ),
    ] = None,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="The sweep's folder (trials, table, plot).")] = None,
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    data: Annotated[Optional[str], typer.Option("--data", "-d", help="Prepared data folder.")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="Train every trial on a generated task.")] = None,
    metric: Annotated[
        Optional[str], typer.Option("--metric", help="metrics.jsonl key to rank by (val_bpb; val_exact for a task).")
    ] = None,
    mode: Annotated[
        Optional[str],
        typer.Option(
            "--mode", help="min or max (default: max for accuracies such as val_exact and exact@N, else min)."
        ),
    ] = None,
    search: Annotated[
        Optional[str],
        typer.Option(
            "--search", help="grid (every combination), random (seeded draws) or optuna (Optuna's sampler on Ray Tune)."
        ),
    ] = None,
    samples: Annotated[Optional[int], typer.Option("--samples", help="Trials a random or optuna search draws.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed of a random search.")] = None,
    max_concurrent: Annotated[
        Optional[int], typer.Option("--max-concurrent", help="Trials at once (default: as the CPUs allow).")
    ] = None,
    cpus_per_trial: Annotated[
        Optional[float], typer.Option("--cpus-per-trial", help="CPUs Ray gives a trial (its train.threads).")
    ] = None,
    gpus_per_trial: Annotated[Optional[float], typer.Option("--gpus-per-trial", help="GPUs Ray gives a trial.")] = None,
    scheduler: Annotated[
        Optional[str], typer.Option("--scheduler", help="fifo (every trial to its end) or asha (early stopping).")
    ] = None,
    logger: Annotated[
        Optional[str],
        typer.Option("--logger", help="Every trial also into one tracker: tensorboard, csv, mlflow or wandb."),
    ] = None,
    address: Annotated[
        Optional[str],
        typer.Option("--address", help="An existing Ray cluster (else RAY_ADDRESS; else Ray starts here)."),
    ] = None,
    num_cpus: Annotated[
        Optional[int], typer.Option("--num-cpus", help="CPUs of the local Ray instance (default: all).")
    ] = None,
    max_failures: Annotated[
        int, typer.Option("--max-failures", help="Retries of a trial whose worker failed (from its checkpoint).")
    ] = 3,
    score: Annotated[
        Optional[str],
        typer.Option(
            "--score",
            help="`alilama eval` arguments that score each trained trial, e.g. --score='--lengths 8,16,32'; "
            "their columns (exact@16, bpb@256, ...) join the table and --metric may name one.",
        ),
    ] = None,
    report_only: Annotated[
        bool, typer.Option("--report-only", help="Rewrite the table and plot from the sweep folder; train nothing.")
    ] = False,
) -> None:
    """Train many runs that differ in a few overrides (a grid or a random search) on Ray Tune; table and plot."""
    if not out:
        raise AlilamaError("give --out DIR, the sweep's folder (run the same command again to continue it)")
    folder = Path(out)
    if report_only:
        plan = sweeps.read_plan(folder)
        if plan is None:
            raise AlilamaError(f"{out!r} holds no sweep ({sweeps.SWEEP_JSON} missing)")
        refresh(folder, plan)
        return report(folder, plan)
    plan = plan_from_args(
        args or [],
        preset=preset,
        config=config,
        data=data,
        task=task,
        metric=metric,
        mode=mode,
        search=search,
        samples=samples,
        seed=seed,
        max_concurrent=max_concurrent,
        cpus_per_trial=cpus_per_trial,
        gpus_per_trial=gpus_per_trial,
        scheduler=scheduler,
        logger=logger,
        score=None if score is None else sweeps.score_args(score),
    )
    with exclusive_lock(folder, what="sweep"):  # a second `alilama sweep` on this folder is refused at once
        start(folder, plan)
        to_run = [t for t in plan.trials if t.status not in (DONE, STOPPED)]
        new = max(0, (plan.samples or 0) - len(plan.trials)) if plan.search == "optuna" else 0
        if to_run or new:
            chosen = f", and {new} more that Optuna chooses" if new else ""
            console.print(
                f"sweep {folder}: {len(plan.trials)} trials, {len(plan.trials) - len(to_run)} already done or "
                f"stopped, training {len(to_run)}{chosen} on Ray",
                highlight=False,
            )
            run_on_ray(folder, plan, to_run, address, num_cpus, max_failures, new)
            if plan.search == "optuna":  # the trials Optuna chose, as Tune's callback recorded them
                known = {t.name for t in plan.trials}
                plan.trials += [t for t in sweeps.read_plan(folder).trials if t.name not in known]
        else:
            console.print(
                f"sweep {folder}: all {len(plan.trials)} trials done or stopped; nothing to train", highlight=False
            )
        refresh(folder, plan)
        score_missing(folder, plan)
        report(folder, plan)
    failed = [t.name for t in plan.trials if t.status == FAILED]
    if failed:
        raise AlilamaError(f"{len(failed)} trial(s) failed: {', '.join(failed)}; see {folder / sweeps.LOGS}")


# -- the plan -------------------------------------------------------------------------------------------------


def plan_from_args(args: list[str], **given: Any) -> Plan:
    """The sweep a command line asks for: at most one sweep YAML, then overrides, then the options given
    (``None``: the file's or the default). The command line has the last word on a field the file names: a
    comma list sweeps it over those values, one value narrows the file's sweep to that value (``task.name=copy``
    runs the file's study for one task), each in the field's place in the file's space."""
    files = [a for a in args if "=" not in a]
    if len(files) > 1:
        raise AlilamaError(f"give at most one sweep YAML; got {', '.join(files)}")
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
        raise AlilamaError(
            f"{', '.join(both)} is both swept (a list of values) and set for every trial; give it one or the other"
        )
    sweeps.check_points(plan.points, space)
    if plan.config and (plan.preset or PRESET in space or any(PRESET in p for p in plan.points.values())):
        raise AlilamaError("give either --config (config:) or --preset (preset:), not both")
    for key in ("config", "data"):  # trials run in other processes and folders: absolute paths
        if getattr(plan, key):
            setattr(plan, key, str(Path(getattr(plan, key)).resolve()))
    for i, arg in enumerate(plan.score[:-1]):  # the scoring step runs in the trial's worker: absolute paths
        if arg == "--data" and Path(plan.score[i + 1]).exists():
            plan.score[i + 1] = str(Path(plan.score[i + 1]).resolve())
    if plan.data and plan.task:
        raise AlilamaError("--data and --task exclude each other: a task run trains on generated examples")
    is_task = bool(plan.task) or "task.name" in space or any(o.startswith("task.name=") for o in overrides)
    if not plan.data and not is_task:
        raise AlilamaError("give --data DIR (a folder written by `alilama data prepare`), or --task NAME")
    if plan.metric is None:
        plan.metric = "val_exact" if is_task else "val_bpb"
    if plan.mode is None:
        higher = plan.metric in ("val_exact", "val_token_accuracy") or plan.metric.startswith(("exact@", "token_acc@"))
        plan.mode = "max" if higher else "min"
    if plan.mode not in ("min", "max"):
        raise AlilamaError(f"--mode must be min or max, not {plan.mode!r}")
    if (plan.scheduler or "fifo") not in SCHEDULERS:
        raise AlilamaError(f"unknown scheduler {plan.scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
    if plan.score and (plan.scheduler or "fifo") != "fifo" and "@" in plan.metric:
        raise AlilamaError(
            f"--scheduler {plan.scheduler} stops trials by the evaluations training logs, and {plan.metric} is "
            "known only after the scoring step; rank by a training metric (val_bpb, val_exact) or use fifo"
        )
    if plan.data:
        from alilama_core.runs.data import TokenData

        TokenData(plan.data)  # a missing or foreign data folder is said now, not in every trial
    if plan.task:
        from alilama_core.runs.tasks import get_task

        get_task(plan.task)  # an unknown task names the ones there are
    tracker(plan, Path("."))  # an unknown logger is said now
    plan.trials = sweeps.expand(plan.space, plan.search, plan.samples, plan.seed)
    if plan.search == "optuna":
        _check_optuna()
    for trial in plan.trials or corners(plan.space):
        try:
            check_trial(plan, trial_config(plan, trial))
        except AlilamaError as exc:
            raise AlilamaError(f"trial {' '.join(trial.args()) or '(no overrides)'}: {exc}") from None
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
        raise AlilamaError("--search optuna needs Optuna beside Ray Tune: pip install optuna") from None


def start(folder: Path, plan: Plan) -> None:
    """Create or continue the sweep folder; each trial's status as its run folder shows it."""
    old = sweeps.read_plan(folder)
    if old is None and folder.is_dir() and any(folder.iterdir()):
        raise AlilamaError(f"{str(folder)!r} exists and holds no sweep ({sweeps.SWEEP_JSON}); give a new --out")
    if old is not None:
        sweeps.check_same_sweep(folder, old, plan)
        if plan.search == "optuna":  # the trials Optuna chose before: its history, and the ones to finish
            plan.trials = [
                Trial(t.name, t.overrides, t.status, t.metric, t.step, t.error, t.scores) for t in old.trials
            ]
        stopped = {t.name for t in old.trials if t.status == STOPPED}  # ASHA's verdicts stand
        for trial in plan.trials:
            trial.status = STOPPED if trial.name in stopped else trial.status
    (folder / sweeps.TRIALS).mkdir(parents=True, exist_ok=True)
    (folder / sweeps.LOGS).mkdir(exist_ok=True)
    refresh(folder, plan)


def score_missing(folder: Path, plan: Plan) -> None:
    """Score the finished trials the scoring step has not seen (a sweep given ``score:`` after they trained)."""
    missing = [t for t in plan.trials if plan.score and t.status == DONE and not t.scores]
    for trial in missing:
        plain_line(f"  scoring   {trial.name}")
        score_trial(folder / sweeps.TRIALS / trial.name, plan.score, str(folder / sweeps.LOGS / f"{trial.name}.log"))
    if missing:
        refresh(folder, plan)


def refresh(folder: Path, plan: Plan) -> None:
    """Each trial's status, metric and step from its run folder (``final/`` means done); write sweep.json."""
    from alilama_core.runs.checkpoint import FINAL, WEIGHTS, read_metrics

    for trial in plan.trials:
        run = folder / sweeps.TRIALS / trial.name
        if (run / FINAL / WEIGHTS).is_file():
            trial.status, trial.error = DONE, None
        elif trial.status in (RUNNING, DONE):  # a driver that was killed left it running
            trial.status = PENDING
        if (run / "metrics.jsonl").is_file():
            trial.metric, trial.step = sweeps.last_value(read_metrics(run), plan.metric)
        trial.scores = (sweeps.read_score(run, plan.score) or {}) if plan.score else {}
        if plan.metric in trial.scores:
            trial.metric = trial.scores[plan.metric]
    sweeps.write_plan(folder, plan)


# -- on Ray Tune ----------------------------------------------------------------------------------------------


def run_trial(config: dict[str, Any]) -> None:
    """One trial in a Ray worker: ``alilama train`` its run folder (or continue it), reporting each evaluation.

    Training runs in a child process, as ``alilama train`` would from a shell (its signal handling, its
    output in the trial's log); it dies with the worker, and a retried trial resumes from the last checkpoint.
    """
    from alilama_core.runs.checkpoint import FINAL, WEIGHTS, checkpoints

    t = spec_of(config)
    run, metric = Path(t["run"]), t["metric"]
    if (run / FINAL / WEIGHTS).is_file():
        args = None  # finished before: only its metric is reported
    elif checkpoints(run):
        args = ["train", "--resume", str(run)]
    else:  # a start killed before its first checkpoint begins again
        args = ["train", *t["train_args"], *(["--overwrite"] if run.exists() else [])]
    reported = 0
    if args:
        with open(t["log"], "a", encoding="utf-8") as log:
            log.write(f"worker {os.getpid()}: alilama {shlex.join(args)}\n")
            log.flush()
            proc = subprocess.Popen(
                [sys.executable, "-m", "alilama_core", *args, "--no-progress"],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
            Path(t["pid"]).write_text(str(proc.pid))
            try:
                while _still_running(proc, 0.5):
                    reported = _report_evaluations(run, metric, reported)
            finally:
                if proc.poll() is None:  # Tune stopped the trial (ASHA): the trainer checkpoints on SIGTERM
                    proc.terminate()
                    proc.wait()
        if proc.returncode:
            raise RuntimeError(f"alilama train exited with status {proc.returncode}; see {t['log']}")
    scores = score_trial(run, t["score"], t["log"]) if t["score"] else {}
    if metric in scores:  # the ranking metric comes from the scoring step: the trial's one result
        from alilama_core.runs.checkpoint import read_metrics

        steps = [r["step"] for r in read_metrics(run) if isinstance(r.get("step"), int)]
        _report({**scores, metric: scores[metric], "step": max(steps, default=0)})
    elif not _report_evaluations(run, metric, reported):
        _report({metric: float("nan"), "step": 0})


def _still_running(proc: subprocess.Popen, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``proc``; ``True`` while it runs (a trial that ends is seen at once)."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return True
    return False


def score_trial(run: Path, args: list[str], log_path: str) -> dict[str, float]:
    """The scoring step on a trained trial: ``alilama eval RUN --json ARGS``, its columns kept in the run folder.

    A trial scored before with the same arguments is not scored again.
    """
    import json

    done = sweeps.read_score(run, args)
    if done is not None:
        return done
    command = [sys.executable, "-m", "alilama_core", "eval", str(run), "--json", "--no-progress", *args]
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"worker {os.getpid()}: alilama {shlex.join(command[3:])}\n")
        log.flush()
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=_die_with_parent)
    if proc.returncode:
        raise RuntimeError(f"the scoring step (alilama eval) exited with status {proc.returncode}; see {log_path}")
    columns = sweeps.score_columns(json.loads(proc.stdout))
    sweeps.write_score(run, args, columns)
    return columns


def _report(metrics: dict[str, Any]) -> None:
    try:
        from ray.tune import report  # Ray >= 2.40
    except ImportError:
        from ray.train import report
    report(metrics)


def _report_evaluations(run: Path, metric: str, reported: int) -> int:
    """Report each row of ``run``'s metrics.jsonl that holds ``metric`` after the first ``reported``; the count."""
    from alilama_core.runs.checkpoint import read_metrics

    if not (run / "metrics.jsonl").is_file():
        return reported
    rows = [r for r in read_metrics(run) if isinstance(r.get(metric), (int, float))]
    for row in rows[reported:]:
        _report({metric: float(row[metric]), "step": int(row.get("step") or 0)})
    return max(reported, len(rows))


def _die_with_parent() -> None:
    """In the training child: be killed when the Ray worker that started it dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def tracker(plan: Plan, folder: Path) -> list[str]:
    """The overrides that log every trial into one experiment of ``plan.logger`` (named after the sweep)."""
    if not plan.logger:
        return []
    from alilama_loggers import shared_tracker

    try:
        return shared_tracker(plan.logger, str(folder.resolve()), f"sweep-{folder.resolve().name}")
    except ValueError as exc:
        raise AlilamaError(f"--logger: {exc}") from None


def spec_of(config: dict[str, Any]) -> dict[str, Any]:
    """A Tune trial's spec: given whole (a grid's or a random search's trials), or built from the point a
    search algorithm chose (``config["sweep"]``: the folder and plan; the swept fields beside it)."""
    if "trial" in config:
        return config["trial"]
    base = config["sweep"]
    plan = Plan(**base["plan"])
    overrides = {k: value_text(config[k]) for k in plan.space}
    return trial_spec(Path(base["folder"]), plan, Trial(sweeps.trial_name(overrides), overrides))


def value_text(value: Any) -> str:
    """A value a search algorithm chose, as the text of its override."""
    if isinstance(value, (bool, str)):
        return str(value)
    return sweeps.format_value(value if isinstance(value, int) else float(value))


def trial_spec(folder: Path, plan: Plan, trial: Trial) -> dict[str, Any]:
    threads = max(1, int(plan.cpus_per_trial))
    run = (folder / sweeps.TRIALS / trial.name).resolve()
    logs = (folder / sweeps.LOGS).resolve()
    return dict(
        name=trial.name,
        run=str(run),
        log=str(logs / f"{trial.name}.log"),
        pid=str(logs / f"{trial.name}.pid"),
        metric=plan.metric,
        score=list(plan.score),
        train_args=[*train_args(plan, trial, run), *tracker(plan, folder), f"train.threads={threads}"],
    )


def train_args(plan: Plan, trial: Trial, out: Path | str) -> list[str]:
    """The ``alilama train`` arguments that train this trial on its own (a swept ``preset`` is its --preset)."""
    args = []
    settings = {o: getattr(plan, o) for o in ("preset", "config", "data", "task")}
    settings["preset"] = plan.fields(trial).get(PRESET, settings["preset"])
    for option, value in settings.items():
        if value:
            args += [f"--{option}", value]
    return [*args, "--out", str(out), *plan.overrides, *field_args(plan, trial)]


PRESET = "preset"
"""A space key that is not a config field: sweeping it trains each trial from another preset (the other is
``sweeps.POINT``, a sweep's named points)."""


def field_args(plan: Plan, trial: Trial) -> list[str]:
    """A trial's overrides of config fields, after the sweep's own (a named point's fields in its place; its
    ``preset`` is an option of train, not an override)."""
    return [f"{k}={v}" for k, v in plan.fields(trial).items() if k != PRESET]


def trial_config(plan: Plan, trial: Trial):
    """The config a trial trains with, built and checked as `alilama train` does."""
    preset = plan.fields(trial).get(PRESET, plan.preset)
    return resolve_config(plan.config, preset, [*plan.overrides, *field_args(plan, trial)])


def run_on_ray(
    folder: Path,
    plan: Plan,
    trials: list[Trial],
    address: str | None,
    num_cpus: int | None,
    max_failures: int,
    new: int = 0,
) -> None:
    """Train ``trials`` (and ``new`` more that the search algorithm chooses) on Ray Tune."""
    import logging

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: no tables of Tune's own; ours below
    if not (address or os.environ.get("RAY_ADDRESS")):
        # A local instance is this machine alone: Ray's processes listen on and talk over loopback only,
        # never on the machine's network address (Ray's switch for single-machine clusters).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
        from ray import tune

        if hasattr(tune, "RunConfig"):
            configs = tune
        else:  # older Ray keeps RunConfig and FailureConfig in ray.train
            from ray import train as configs
    except ImportError:
        raise AlilamaError("alilama sweep runs on Ray Tune: pip install 'alilama[sweep]' (ray[tune])") from None

    address = address or os.environ.get("RAY_ADDRESS") or None
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        else:  # a local instance, on the cores this machine has (or --num-cpus)
            ray.init(
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
    try:
        by_name = {t.name: t for t in plan.trials}
        if plan.search == "optuna":
            param_space, search = searched_space(tune, folder, plan, trials)
            samples = len(trials) + new
        else:
            param_space = {"trial": tune.grid_search([trial_spec(folder, plan, t) for t in trials])}
            search, samples = {}, 1
        tuner = tune.Tuner(
            tune.with_resources(run_trial, {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial}),
            param_space=param_space,
            tune_config=tune.TuneConfig(
                num_samples=samples,
                max_concurrent_trials=plan.max_concurrent if not search else None,
                trial_name_creator=_tune_name,
                trial_dirname_creator=_tune_name,
                reuse_actors=True,  # a trial's worker takes the next trial: no new process and imports per trial
                **search,
                **scheduler_settings(plan),
            ),
            run_config=configs.RunConfig(
                name="tune",
                storage_path=str((folder / ".tune").resolve()),
                failure_config=configs.FailureConfig(max_failures=max_failures),
                callbacks=[_status_callback(tune, folder, plan, by_name)],
                verbose=0,
            ),
        )
        tuner.fit()
    finally:
        if started:
            ray.shutdown()


def _tune_name(trial) -> str:
    return spec_of(trial.config)["name"]


def searched_space(tune, folder: Path, plan: Plan, unfinished: list[Trial]) -> tuple[dict, dict]:
    """Tune's settings for an Optuna search: the space as Tune domains, Optuna's sampler seeded with the
    sweep's seed and told every result of an earlier run of the sweep, the unfinished trials first."""
    from dataclasses import asdict

    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    def domain(values):
        if not sweeps.is_range(values):
            return tune.choice(list(values))
        ((kind, (low, high)),) = values.items()
        return {"uniform": tune.uniform, "loguniform": tune.loguniform}.get(kind, tune.randint)(
            low, high + 1 if kind == "randint" else high
        )

    def typed(trial: Trial) -> dict[str, Any]:
        point = {}
        for k, values in plan.space.items():
            text = trial.overrides[k]
            kind = next(iter(values)) if sweeps.is_range(values) else None
            point[k] = text if kind is None else int(text) if kind == "randint" else float(text)
        return point

    finished = [t for t in plan.trials if t not in unfinished and t.metric is not None and t.metric == t.metric]
    searcher = OptunaSearch(
        space=OptunaSearch.convert_search_space({k: domain(v) for k, v in plan.space.items()}),
        metric=plan.metric,
        mode=plan.mode,
        # the sweep's seed, moved on by the results it already has: a continued study draws new points
        seed=plan.seed + len(finished),
        points_to_evaluate=[typed(t) for t in unfinished] or None,
    )
    for trial in finished:
        searcher.add_evaluated_point(typed(trial), trial.metric)
    base = {k: v for k, v in asdict(plan).items() if k != "trials"}
    search = searcher if not plan.max_concurrent else ConcurrencyLimiter(searcher, plan.max_concurrent)
    return {"sweep": {"folder": str(folder), "plan": base}}, {"search_alg": search}


def scheduler_settings(plan: Plan) -> dict[str, Any]:
    """ASHA stops the worse trials at each rung, by the evaluations they report (rungs from train.eval_every)."""
    if (plan.scheduler or "fifo") == "fifo":
        return {}
    from ray.tune.schedulers import ASHAScheduler

    cfg = trial_config(plan, plan.trials[0] if plan.trials else corners(plan.space)[0]).train
    if not cfg.max_steps or not cfg.eval_every:
        raise AlilamaError("--scheduler asha needs train.max_steps and train.eval_every (its rungs are evaluations)")
    # The trainer ends each trial at max_steps itself: were ASHA to stop a trial on its last evaluation
    # (stop_last_trials), it would kill the trainer between that row of metrics and final/, a finished trial
    # left without its final weights.
    asha = ASHAScheduler(time_attr="step", max_t=cfg.max_steps, grace_period=cfg.eval_every, stop_last_trials=False)
    return {"scheduler": asha, "metric": plan.metric, "mode": plan.mode}


def _status_callback(tune, folder: Path, plan: Plan, by_name: dict[str, Trial]):
    """A Tune callback (in this process) that keeps sweep.json's statuses and prints one line per event."""

    class Status(tune.Callback):
        def _set(self, trial, status: str, error: str | None = None) -> Trial:
            spec = spec_of(trial.config)
            if spec["name"] not in by_name:  # a point the search algorithm chose: a new trial of the sweep
                overrides = {k: value_text(trial.config[k]) for k in plan.space}
                by_name[spec["name"]] = Trial(spec["name"], overrides)
                plan.trials.append(by_name[spec["name"]])
            t = by_name[spec["name"]]
            t.status, t.error = status, error
            sweeps.write_plan(folder, plan)
            return t

        def on_trial_start(self, iteration, trials, trial, **info):
            self._set(trial, RUNNING)
            plain_line(f"  started   {spec_of(trial.config)['name']}")

        def on_trial_recover(self, iteration, trials, trial, **info):
            self._set(trial, RUNNING)
            plain_line(
                f"  retrying  {spec_of(trial.config)['name']}: its worker failed; continuing from its checkpoint"
            )

        def on_trial_complete(self, iteration, trials, trial, **info):
            finished = (Path(spec_of(trial.config)["run"]) / "final").is_dir()
            t = self._set(trial, DONE if finished else STOPPED)
            value = (trial.last_result or {}).get(plan.metric)
            plain_line(f"  {t.status:<9} {t.name}  {plan.metric} {value}")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._set(trial, FAILED, str(getattr(trial, "error_file", "") or "failed"))
            plain_line(f"  FAILED    {spec_of(trial.config)['name']} (see its log in {folder / sweeps.LOGS})")

    return Status()


# -- results ---------------------------------------------------------------------------------------------------


def report(folder: Path, plan: Plan) -> None:
    """Write results.csv, results.md and results.png (and, with a swept seed, the table over seeds as
    results-seeds.csv and .md); print the table and the best trial with its command."""
    from alilama_core.base.files import atomic_write_text

    atomic_write_text(folder / "results.csv", sweeps.table_csv(plan))
    markdown = sweeps.table_markdown(plan)
    atomic_write_text(folder / "results.md", markdown)
    over_seeds = sweeps.seed_table_rows(plan)
    if over_seeds is not None:
        atomic_write_text(folder / "results-seeds.csv", sweeps.as_csv(*over_seeds))
        atomic_write_text(folder / "results-seeds.md", sweeps.as_markdown(*over_seeds))
    if any(t.metric is not None for t in plan.trials) and plan.space:
        plot_sweep(plan, folder / "results.png")
    sys.stdout.write(markdown)
    best = sweeps.ranked(plan)[0] if plan.trials else None
    if best is None or best.metric is None:
        console.print("no trial has a value of " + str(plan.metric) + " yet", highlight=False)
        return
    command = shlex.join(["alilama", "train", *train_args(plan, best, f"runs/{best.name}")])
    console.print(
        f"best: {best.name} {plan.metric} {best.metric:.4f} ({' '.join(best.args()) or 'no overrides'}); "
        f"reproduce: {command}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    console.print(
        f"table: {folder / 'results.md'}, {folder / 'results.csv'}"
        + (f"; over seeds: {folder / 'results-seeds.md'}" if over_seeds is not None else "")
        + f"; plot: {folder / 'results.png'}",
        highlight=False,
        markup=False,
    )


def plot_sweep(plan: Plan, out: Path) -> Path:
    """The metric against each swept field (one panel each; seeds averaged, their spread as error bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from alilama_core.app.plot import save_figure

    fields = [k for k in plan.space if not sweeps.is_seed(k)] or list(plan.space)
    fig, axes = plt.subplots(1, len(fields), figsize=(5.5 * len(fields), 4.5), dpi=120, squeeze=False)
    for ax, swept in zip(axes[0], fields):
        values = sweeps.field_values(plan, swept)
        numeric = sweeps.is_range(plan.space[swept])  # a range: the values on a number line (log for loguniform)
        joined = not numeric and swept != sweeps.POINT  # named points have no order: no line between them
        for i, (label, points) in enumerate(sorted(sweeps.series(plan, swept).items())):
            kept = [v for v in values if points[v]]
            xs = [float(v) for v in kept] if numeric else [values.index(v) for v in kept]
            means = [sum(points[v]) / len(points[v]) for v in kept]
            spread = [_std(points[v]) for v in kept]
            style = dict(marker="o", capsize=4, color=f"C{i}", label=", ".join(label) or None)
            ax.errorbar(xs, means, yerr=spread, linestyle="-" if joined else "none", **style)
        if numeric:
            ax.set_xscale("log" if "loguniform" in plan.space[swept] else "linear")
        else:
            slanted = sum(len(v) for v in values) > 40  # long names side by side would overlap
            ax.set_xticks(
                range(len(values)), values, rotation=30 if slanted else 0, ha="right" if slanted else "center"
            )
        ax.set_xlabel(swept)
        ax.set_ylabel(plan.metric)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=9)
    seeds = [k for k in plan.space if sweeps.is_seed(k)]
    note = f" (mean over {', '.join(seeds)}; bars: standard deviation)" if seeds else ""
    fig.suptitle(f"{plan.metric} by swept setting{note}")
    return save_figure(fig, out)


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
