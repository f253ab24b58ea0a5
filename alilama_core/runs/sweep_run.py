"""A whole sweep in one call, ``run_sweep``: the plan, its trials on Ray Tune, the scoring step, the table.

``alilama sweep`` is this call with its options; from Python::

    from alilama_core.runs.sweep_run import run_sweep

    result = run_sweep("sweeps/pos", ["model.positional=alibi,rope", "train.seed=0,1"], preset="tiny", data="data/")
    result.best.name, result.best.metric        # the best trial and its val_bpb
    print(result.table)                          # results.md: every trial, best first

Each trial is an ordinary run folder under ``SWEEP/trials/``; running the same sweep again trains only what
did not finish (``start`` reads each trial's status from its run folder), and a second sweep in the same
folder is refused.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alilama_core.base.errors import AlilamaError
from alilama_core.base.files import atomic_write_text, exclusive_lock
from alilama_core.runs import sweeps
from alilama_core.runs.sweep_plan import plan_from_args, tracker_args, train_args
from alilama_core.runs.sweeps import DONE, FAILED, PENDING, RUNNING, STOPPED, Plan, Trial


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class SweepResult:
    """What a sweep left in its folder: the plan with each trial's status and metric, and its table."""

    folder: Path
    plan: Plan
    table: str
    """The text of ``results.md``: one row per trial, best first."""
    seeds_table: Path | None = None
    """``results-seeds.md``, written when a field named ``*.seed`` is swept."""
    plot: Path | None = None
    """``results.png``, drawn once a trial has a value of the metric."""

    @property
    def best(self) -> Trial | None:
        """The best trial by the sweep's metric; ``None`` while no trial has a value."""
        best = sweeps.ranked(self.plan)[0] if self.plan.trials else None
        return None if best is None or best.metric is None else best

    @property
    def failed(self) -> list[Trial]:
        return [t for t in self.plan.trials if t.status == FAILED]

    def reproduce(self, trial: Trial) -> str:
        """The ``alilama train`` command that trains ``trial`` on its own, into ``runs/NAME``."""
        return shlex.join(["alilama", "train", *train_args(self.plan, trial, f"runs/{trial.name}")])


def run_sweep(
    out: str | Path,
    args: Sequence[str] = (),
    *,
    preset: str | None = None,
    config: str | None = None,
    data: str | None = None,
    task: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    search: str | None = None,
    samples: int | None = None,
    seed: int | None = None,
    max_concurrent: int | None = None,
    cpus_per_trial: float | None = None,
    gpus_per_trial: float | None = None,
    scheduler: str | None = None,
    logger: str | None = None,
    score: str | list[str] | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    max_failures: int = 3,
    report_only: bool = False,
    echo: Callable[[str], None] = print,
    on_trial: Callable[[str], None] = _to_stderr,
) -> SweepResult:
    """Train the sweep ``args`` asks for (an optional sweep YAML, then ``section.field=a,b`` overrides) in the
    folder ``out``, or continue it; write its table and plot; the result.

    The settings, ``preset`` to ``score``, are a sweep file's keys and ``alilama sweep``'s options by the same
    names (``None``: the sweep file's, else the default); ``score`` is the scoring step's ``alilama eval`` arguments, as a string or a list. ``address``
    names a Ray cluster (else ``RAY_ADDRESS``, else Ray starts here on ``num_cpus`` cores). With
    ``report_only`` the table and plot are written again from the folder and nothing is trained.
    ``logger`` logs every trial into one experiment of that logger (its ``Logger.shared_options``). ``echo``
    is told what the sweep is about to do, ``on_trial`` a line per trial event (started, retrying, done,
    stopped, FAILED, scoring). Bad settings raise ``ConfigError`` before anything is written; a trial that
    fails does not raise: it is in ``result.failed``, its log in ``SWEEP/logs/``.
    """
    given = {k: v for k, v in locals().items() if k in sweeps.FILE_KEYS}  # the settings, by a sweep file's names
    folder = Path(out)
    if report_only:
        plan = sweeps.read_plan(folder)
        if plan is None:
            raise AlilamaError(f"{str(out)!r} holds no sweep ({sweeps.SWEEP_JSON} missing)")
        refresh(folder, plan)
        return write_results(folder, plan)
    if score is not None:
        given["score"] = sweeps.score_args(score)
    plan = plan_from_args(list(args), **given)
    with exclusive_lock(folder, what="sweep"):  # a second sweep on this folder is refused at once
        start(folder, plan)
        to_run = [t for t in plan.trials if t.status not in (DONE, STOPPED)]
        new = max(0, (plan.samples or 0) - len(plan.trials)) if plan.search == "optuna" else 0
        if to_run or new:
            chosen = f", and {new} more that Optuna chooses" if new else ""
            echo(
                f"sweep {folder}: {len(plan.trials)} trials, {len(plan.trials) - len(to_run)} already done or "
                f"stopped, training {len(to_run)}{chosen} on Ray"
            )
            from alilama_core.runs.sweep_ray import run_on_ray

            tracked = tracker_args(plan, folder)
            run_on_ray(
                folder,
                plan,
                to_run,
                address=address,
                num_cpus=num_cpus,
                max_failures=max_failures,
                new=new,
                tracked=tracked,
                on_trial=on_trial,
            )
            if plan.search == "optuna":  # the trials Optuna chose, as Tune's callback recorded them
                known = {t.name for t in plan.trials}
                plan.trials += [t for t in sweeps.read_plan(folder).trials if t.name not in known]
        else:
            echo(f"sweep {folder}: all {len(plan.trials)} trials done or stopped; nothing to train")
        refresh(folder, plan)
        score_missing(folder, plan, on_trial)
        return write_results(folder, plan)


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


def score_missing(folder: Path, plan: Plan, on_trial: Callable[[str], None] = _to_stderr) -> None:
    """Score the finished trials the scoring step has not seen (a sweep given ``score:`` after they trained)."""
    from alilama_core.runs.sweep_trial import score_trial

    missing = [t for t in plan.trials if plan.score and t.status == DONE and not t.scores]
    for trial in missing:
        on_trial(f"  scoring   {trial.name}")
        score_trial(folder / sweeps.TRIALS / trial.name, plan.score, str(folder / sweeps.LOGS / f"{trial.name}.log"))
    if missing:
        refresh(folder, plan)


def write_results(folder: Path, plan: Plan) -> SweepResult:
    """Write results.csv, results.md and results.png (and, with a swept seed, the table over seeds as
    results-seeds.csv and .md); what was written."""
    atomic_write_text(folder / sweeps.RESULTS_CSV, sweeps.table_csv(plan))
    markdown = sweeps.table_markdown(plan)
    atomic_write_text(folder / sweeps.RESULTS_MD, markdown)
    result = SweepResult(folder, plan, markdown)
    over_seeds = sweeps.seed_table_rows(plan)
    if over_seeds is not None:
        atomic_write_text(folder / sweeps.SEEDS_CSV, sweeps.as_csv(*over_seeds))
        result.seeds_table = folder / sweeps.SEEDS_MD
        atomic_write_text(result.seeds_table, sweeps.as_markdown(*over_seeds))
    if any(t.metric is not None for t in plan.trials) and plan.space:
        from alilama_core.runs.sweep_plot import plot_sweep

        result.plot = plot_sweep(plan, folder / sweeps.RESULTS_PNG)
    return result
