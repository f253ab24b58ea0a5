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
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from alilama_core.app.common import ConfigOpt, PresetOpt, console, help_examples, plain_line, resolve_config
from alilama_core.contracts.errors import AlilamaError, ConfigError
from alilama_core.contracts.files import exclusive_lock
from alilama_core.runs import sweeps
from alilama_core.runs.sweeps import DONE, FAILED, PENDING, RUNNING, STOPPED, Plan, Trial

SCHEDULERS = ("fifo", "asha")

SWEEP_EXAMPLES = help_examples(
    "alilama sweep --data d/ --out sw model.positional=alibi,rope,learned",
    "alilama sweep configs/sweeps/positional.yaml --data d/ --out sw",
    "alilama sweep sweep.yaml --data d/ --out sw --max-concurrent 2",
    "alilama sweep sweep.yaml --data d/ --out sw --address HEAD:6379",
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
    mode: Annotated[Optional[str], typer.Option("--mode", help="min or max (default: min, max for val_exact).")] = None,
    search: Annotated[Optional[str], typer.Option("--search", help="grid (every combination) or random.")] = None,
    samples: Annotated[Optional[int], typer.Option("--samples", help="Trials a random search draws.")] = None,
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
    files = [a for a in args or [] if "=" not in a]
    if len(files) > 1:
        raise AlilamaError(f"give at most one sweep YAML; got {', '.join(files)}")
    file = sweeps.read_sweep_file(files[0]) if files else {}
    fixed, space = sweeps.split_overrides([a for a in args or [] if "=" in a])
    given = dict(
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
    )
    settings = {k: v for k, v in file.items() if k not in ("space", "overrides")}
    settings.update({k: v for k, v in given.items() if v is not None})
    plan = make_plan(settings, [*file.get("overrides", []), *fixed], {**file.get("space", {}), **space})
    with exclusive_lock(folder, what="sweep"):  # a second `alilama sweep` on this folder is refused at once
        start(folder, plan)
        to_run = [t for t in plan.trials if t.status not in (DONE, STOPPED)]
        if to_run:
            console.print(
                f"sweep {folder}: {len(plan.trials)} trials, {len(plan.trials) - len(to_run)} already done or "
                f"stopped, training {len(to_run)} on Ray",
                highlight=False,
            )
            run_on_ray(folder, plan, to_run, address, num_cpus, max_failures)
        else:
            console.print(
                f"sweep {folder}: all {len(plan.trials)} trials done or stopped; nothing to train", highlight=False
            )
        refresh(folder, plan)
        report(folder, plan)
    failed = [t.name for t in plan.trials if t.status == FAILED]
    if failed:
        raise AlilamaError(f"{len(failed)} trial(s) failed: {', '.join(failed)}; see {folder / sweeps.LOGS}")


# -- the plan -------------------------------------------------------------------------------------------------


def make_plan(settings: dict[str, Any], overrides: list[str], space: dict[str, list[str]]) -> Plan:
    """The sweep from its settings; every trial's config is built and checked here, before Ray starts."""
    plan = Plan(**{k: v for k, v in settings.items() if v is not None}, overrides=overrides, space=space)
    both = [o.partition("=")[0].strip().lstrip("-") for o in overrides]
    both = sorted(set(both) & set(space))
    if both:
        raise AlilamaError(
            f"{', '.join(both)} is both swept (a list of values) and set for every trial; give it one or the other"
        )
    if plan.config and plan.preset:
        raise AlilamaError("give either --config (config:) or --preset (preset:), not both")
    for key in ("config", "data"):  # trials run in other processes and folders: absolute paths
        if getattr(plan, key):
            setattr(plan, key, str(Path(getattr(plan, key)).resolve()))
    if plan.data and plan.task:
        raise AlilamaError("--data and --task exclude each other: a task run trains on generated examples")
    is_task = bool(plan.task) or any(o.startswith("task.name=") for o in overrides)
    if not plan.data and not is_task:
        raise AlilamaError("give --data DIR (a folder written by `alilama data prepare`), or --task NAME")
    if plan.metric is None:
        plan.metric = "val_exact" if is_task else "val_bpb"
    if plan.mode is None:
        plan.mode = "max" if plan.metric in ("val_exact", "val_token_accuracy") else "min"
    if plan.mode not in ("min", "max"):
        raise AlilamaError(f"--mode must be min or max, not {plan.mode!r}")
    if (plan.scheduler or "fifo") not in SCHEDULERS:
        raise AlilamaError(f"unknown scheduler {plan.scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
    if plan.data:
        from alilama_core.runs.data import TokenData

        TokenData(plan.data)  # a missing or foreign data folder is said now, not in every trial
    if plan.task:
        from alilama_core.runs.tasks import get_task

        get_task(plan.task)  # an unknown task names the ones there are
    tracker(plan, Path("."))  # an unknown logger is said now
    plan.trials = sweeps.expand(plan.space, plan.search, plan.samples, plan.seed)
    for trial in plan.trials:
        try:
            resolve_config(plan.config, plan.preset, [*plan.overrides, *trial.args()])
        except ConfigError as exc:
            raise AlilamaError(f"trial {' '.join(trial.args()) or '(no overrides)'}: {exc}") from None
    return plan


def start(folder: Path, plan: Plan) -> None:
    """Create or continue the sweep folder; each trial's status as its run folder shows it."""
    old = sweeps.read_plan(folder)
    if old is None and folder.is_dir() and any(folder.iterdir()):
        raise AlilamaError(f"{str(folder)!r} exists and holds no sweep ({sweeps.SWEEP_JSON}); give a new --out")
    if old is not None:
        sweeps.check_same_sweep(folder, old, plan)
        stopped = {t.name for t in old.trials if t.status == STOPPED}  # ASHA's verdicts stand
        for trial in plan.trials:
            trial.status = STOPPED if trial.name in stopped else trial.status
    (folder / sweeps.TRIALS).mkdir(parents=True, exist_ok=True)
    (folder / sweeps.LOGS).mkdir(exist_ok=True)
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
    sweeps.write_plan(folder, plan)


# -- on Ray Tune ----------------------------------------------------------------------------------------------


def run_trial(config: dict[str, Any]) -> None:
    """One trial in a Ray worker: ``alilama train`` its run folder (or continue it), reporting each evaluation.

    Training runs in a child process, as ``alilama train`` would from a shell (its signal handling, its
    output in the trial's log); it dies with the worker, and a retried trial resumes from the last checkpoint.
    """
    from alilama_core.runs.checkpoint import FINAL, WEIGHTS, checkpoints

    t = config["trial"]
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
                while proc.poll() is None:
                    time.sleep(0.5)
                    reported = _report_evaluations(run, metric, reported)
            finally:
                if proc.poll() is None:  # Tune stopped the trial (ASHA): the trainer checkpoints on SIGTERM
                    proc.terminate()
                    proc.wait()
        if proc.returncode:
            raise RuntimeError(f"alilama train exited with status {proc.returncode}; see {t['log']}")
    if not _report_evaluations(run, metric, reported):
        _report({metric: float("nan"), "step": 0})


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
        train_args=[*train_args(plan, trial, run), *tracker(plan, folder), f"train.threads={threads}"],
    )


def train_args(plan: Plan, trial: Trial, out: Path | str) -> list[str]:
    """The ``alilama train`` arguments that train this trial on its own."""
    args = []
    for option in ("preset", "config", "data", "task"):
        if getattr(plan, option):
            args += [f"--{option}", getattr(plan, option)]
    return [*args, "--out", str(out), *plan.overrides, *trial.args()]


def run_on_ray(
    folder: Path, plan: Plan, trials: list[Trial], address: str | None, num_cpus: int | None, max_failures: int
) -> None:
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
        by_name = {t.name: t for t in trials}
        tuner = tune.Tuner(
            tune.with_resources(run_trial, {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial}),
            param_space={"trial": tune.grid_search([trial_spec(folder, plan, t) for t in trials])},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=plan.max_concurrent,
                trial_name_creator=_tune_name,
                trial_dirname_creator=_tune_name,
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
    return trial.config["trial"]["name"]


def scheduler_settings(plan: Plan) -> dict[str, Any]:
    """ASHA stops the worse trials at each rung, by the evaluations they report (rungs from train.eval_every)."""
    if (plan.scheduler or "fifo") == "fifo":
        return {}
    from ray.tune.schedulers import ASHAScheduler

    cfg = resolve_config(plan.config, plan.preset, [*plan.overrides, *plan.trials[0].args()]).train
    if not cfg.max_steps or not cfg.eval_every:
        raise AlilamaError("--scheduler asha needs train.max_steps and train.eval_every (its rungs are evaluations)")
    asha = ASHAScheduler(time_attr="step", max_t=cfg.max_steps, grace_period=cfg.eval_every)
    return {"scheduler": asha, "metric": plan.metric, "mode": plan.mode}


def _status_callback(tune, folder: Path, plan: Plan, by_name: dict[str, Trial]):
    """A Tune callback (in this process) that keeps sweep.json's statuses and prints one line per event."""

    class Status(tune.Callback):
        def _set(self, trial, status: str, error: str | None = None) -> Trial:
            t = by_name[trial.config["trial"]["name"]]
            t.status, t.error = status, error
            sweeps.write_plan(folder, plan)
            return t

        def on_trial_start(self, iteration, trials, trial, **info):
            self._set(trial, RUNNING)
            plain_line(f"  started   {trial.config['trial']['name']}")

        def on_trial_recover(self, iteration, trials, trial, **info):
            self._set(trial, RUNNING)
            plain_line(
                f"  retrying  {trial.config['trial']['name']}: its worker failed; continuing from its checkpoint"
            )

        def on_trial_complete(self, iteration, trials, trial, **info):
            finished = (Path(trial.config["trial"]["run"]) / "final").is_dir()
            t = self._set(trial, DONE if finished else STOPPED)
            value = (trial.last_result or {}).get(plan.metric)
            plain_line(f"  {t.status:<9} {t.name}  {plan.metric} {value}")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._set(trial, FAILED, str(getattr(trial, "error_file", "") or "failed"))
            plain_line(f"  FAILED    {trial.config['trial']['name']} (see its log in {folder / sweeps.LOGS})")

    return Status()


# -- results ---------------------------------------------------------------------------------------------------


def report(folder: Path, plan: Plan) -> None:
    """Write results.csv, results.md and results.png; print the table and the best trial with its command."""
    from alilama_core.contracts.files import atomic_write_text

    atomic_write_text(folder / "results.csv", sweeps.table_csv(plan))
    markdown = sweeps.table_markdown(plan)
    atomic_write_text(folder / "results.md", markdown)
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
        f"table: {folder / 'results.md'}, {folder / 'results.csv'}; plot: {folder / 'results.png'}",
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
        values = plan.space[swept]
        for i, (label, points) in enumerate(sorted(sweeps.series(plan, swept).items())):
            xs = [x for x, v in enumerate(values) if points[v]]
            means = [sum(points[values[x]]) / len(points[values[x]]) for x in xs]
            spread = [_std(points[values[x]]) for x in xs]
            ax.errorbar(xs, means, yerr=spread, marker="o", capsize=4, color=f"C{i}", label=", ".join(label) or None)
        ax.set_xticks(range(len(values)), values)
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


def register(app: typer.Typer) -> None:
    """Add ``alilama sweep`` to the root app."""
    app.command("sweep", context_settings={"ignore_unknown_options": True}, epilog=SWEEP_EXAMPLES)(sweep_cmd)
