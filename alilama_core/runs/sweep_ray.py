"""A sweep's trials on Ray Tune: where and how many at once is Ray's; each trial is ``sweep_trial.run_trial``.

Ray starts here on this machine's cores (loopback only) unless an address is given, and stops at the end.
A grid's or a random search's trials go to Tune whole; an Optuna search gives Tune the space and lets
Optuna's sampler choose each next point. A trial whose worker dies is retried by Tune (``FailureConfig``)
and continues from its run folder's last checkpoint; a Tune callback in this process keeps ``sweep.json``'s
statuses as trials start and end, and says each event in one line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.runs import sweeps
from alilama_core.runs.sweep_plan import corners, trial_config
from alilama_core.runs.sweep_trial import run_trial, spec_of, trial_spec, value_text
from alilama_core.runs.sweeps import DONE, FAILED, RUNNING, STOPPED, Plan, Trial


def run_on_ray(
    folder: Path,
    plan: Plan,
    trials: list[Trial],
    *,
    address: str | None,
    num_cpus: int | None,
    max_failures: int,
    new: int = 0,
    tracked: list[str],
    on_trial: Callable[[str], None],
) -> None:
    """Train ``trials`` (and ``new`` more that the search algorithm chooses) on Ray Tune; ``tracked``: the
    overrides of the sweep's shared tracker; ``on_trial``: told a line per trial event."""
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
        else:  # a local instance, on the cores this machine has (or num_cpus)
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
            param_space, search = searched_space(tune, folder, plan, trials, tracked)
            samples = len(trials) + new
        else:
            param_space = {"trial": tune.grid_search([trial_spec(folder, plan, t, tracked) for t in trials])}
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
                callbacks=[_status_callback(tune, folder, plan, by_name, on_trial)],
                verbose=0,
            ),
        )
        tuner.fit()
    finally:
        if started:
            ray.shutdown()


def _tune_name(trial) -> str:
    return spec_of(trial.config)["name"]


def searched_space(tune, folder: Path, plan: Plan, unfinished: list[Trial], tracked: list[str]) -> tuple[dict, dict]:
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
    return {"sweep": {"folder": str(folder), "plan": base, "tracked": tracked}}, {"search_alg": search}


def scheduler_settings(plan: Plan) -> dict[str, Any]:
    """ASHA stops the worse trials at each rung, by the evaluations they report (rungs from train.eval_every)."""
    if (plan.scheduler or "fifo") == "fifo":
        return {}
    from ray.tune.schedulers import ASHAScheduler

    cfg = trial_config(plan, plan.trials[0] if plan.trials else corners(plan.space)[0]).train
    if not cfg.max_steps or not cfg.eval_every:
        raise ConfigError("--scheduler asha needs train.max_steps and train.eval_every (its rungs are evaluations)")
    # The trainer ends each trial at max_steps itself: were ASHA to stop a trial on its last evaluation
    # (stop_last_trials), it would kill the trainer between that row of metrics and final/, a finished trial
    # left without its final weights.
    asha = ASHAScheduler(time_attr="step", max_t=cfg.max_steps, grace_period=cfg.eval_every, stop_last_trials=False)
    return {"scheduler": asha, "metric": plan.metric, "mode": plan.mode}


def _status_callback(tune, folder: Path, plan: Plan, by_name: dict[str, Trial], say: Callable[[str], None]):
    """A Tune callback (in this process) that keeps sweep.json's statuses and says one line per event."""

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
            say(f"  started   {spec_of(trial.config)['name']}")

        def on_trial_recover(self, iteration, trials, trial, **info):
            self._set(trial, RUNNING)
            say(f"  retrying  {spec_of(trial.config)['name']}: its worker failed; continuing from its checkpoint")

        def on_trial_complete(self, iteration, trials, trial, **info):
            finished = (Path(spec_of(trial.config)["run"]) / "final").is_dir()
            t = self._set(trial, DONE if finished else STOPPED)
            value = (trial.last_result or {}).get(plan.metric)
            say(f"  {t.status:<9} {t.name}  {plan.metric} {value}")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._set(trial, FAILED, str(getattr(trial, "error_file", "") or "failed"))
            say(f"  FAILED    {spec_of(trial.config)['name']} (see its log in {folder / sweeps.LOGS})")

    return Status()
