"""One trial of a sweep in a Ray worker: ``alilama train`` in a child process, each evaluation reported to Tune.

Tune hands ``run_trial`` the trial's spec (``trial_spec``: its run folder, log, metric, scoring step and
``alilama train`` arguments), or, for a point a search algorithm chose, the sweep's plan and that point
(``spec_of`` builds the spec from them). Training runs as ``alilama train`` would from a shell (its signal
handling, its output in the trial's log); it dies with the worker, and a retried trial resumes from the
last checkpoint. ``score_trial`` is the scoring step, run on a trained trial here or, for a trial trained
before the sweep had one, by the driver.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from alilama_core.runs import sweeps
from alilama_core.runs.sweep_plan import train_args
from alilama_core.runs.sweeps import Plan, Trial


def trial_spec(folder: Path, plan: Plan, trial: Trial, tracked: list[str]) -> dict[str, Any]:
    """What a worker needs to train ``trial`` (``tracked``: the overrides of the sweep's shared tracker)."""
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
        train_args=[*train_args(plan, trial, run), *tracked, f"train.threads={threads}"],
    )


def spec_of(config: dict[str, Any]) -> dict[str, Any]:
    """A Tune trial's spec: given whole (a grid's or a random search's trials), or built from the point a
    search algorithm chose (``config["sweep"]``: the folder, plan and tracker overrides; the swept fields beside it)."""
    if "trial" in config:
        return config["trial"]
    base = config["sweep"]
    plan = Plan(**base["plan"])
    overrides = {k: value_text(config[k]) for k in plan.space}
    return trial_spec(Path(base["folder"]), plan, Trial(sweeps.trial_name(overrides), overrides), base["tracked"])


def value_text(value: Any) -> str:
    """A value a search algorithm chose, as the text of its override."""
    if isinstance(value, (bool, str)):
        return str(value)
    return sweeps.format_value(value if isinstance(value, int) else float(value))


def run_trial(config: dict[str, Any]) -> None:
    """One trial in a Ray worker: ``alilama train`` its run folder (or continue it), reporting each evaluation."""
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
