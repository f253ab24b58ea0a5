"""``mlflow``: an MLflow run, in a SQLite store in the run (``RUN/trackers/mlflow/mlflow.db``,
artifacts beside it) unless ``train.logger_options.mlflow.tracking_uri`` names another store.

The config (flattened), the parameter count and the data are the run's
params; each metrics row is one ``log_batch`` at its step; samples are text
artifacts ``samples/step-XXXXXXXX.txt``; the end's summary becomes tags
``final.*`` and the run is marked ``FINISHED`` (an interrupted one
``KILLED``). The run id is kept in ``run.json``: a resumed training reopens
the same run, skips the steps it already holds and replays from
``metrics.jsonl`` any it lacks, so each step is there once.
Runs share the experiment ``experiment`` (default ``alilama``), so a study's
runs in one store compare side by side. A tracking server (an ``http(s)://``
URI) is asked once when the logger starts, for at most ``PROBE_TIMEOUT_S``
seconds and without retries, and it says so on stderr: one that does not
answer is reported at once, and the run goes on without MLflow.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from alilama_core.contracts.logger import Logger, RunStart, replay
from alilama_loggers.common import describe_end, log_dir, run_params

MAX_PARAM = 6000  # characters MLflow keeps of a param's value
PROBE_TIMEOUT_S = 5
"""How long a tracking server may take to answer the first request, once, before the logger gives up
(MLflow's own defaults retry a server that does not answer for about four minutes)."""


def reach_server(client, uri: str) -> None:
    """Ask the tracking server at ``uri`` once, without retries and for at most ``PROBE_TIMEOUT_S`` seconds;
    say so on stderr first. A server that does not answer raises ``ConnectionError`` naming it."""
    print(f"mlflow: connecting to the tracking server {uri} (at most {PROBE_TIMEOUT_S} s)", file=sys.stderr, flush=True)
    quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(PROBE_TIMEOUT_S)}
    saved = {key: os.environ.get(key) for key in quick}
    os.environ.update(quick)  # MLflow reads them at each request
    try:
        client.search_experiments(max_results=1)
    except Exception as exc:  # MlflowException wraps the connection error in its message
        found = re.search(r"\[Errno -?\d+\] ([^\"')]+)|(timed out)", str(exc))
        why = (found.group(1) or found.group(2)).strip() if found else " ".join(str(exc).split())[:300]
        message = (
            f"cannot reach the MLflow tracking server {uri} ({why}); start it, or fix "
            "train.logger_options.mlflow.tracking_uri; going on without MLflow"
        )
        print(f"mlflow: {message}", file=sys.stderr, flush=True)
        raise ConnectionError(message) from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _artifacts_beside(uri: str) -> str | None:
    """A new experiment's artifact folder: beside a SQLite store (MLflow's default, ``./mlruns``,
    depends on the working directory); a server's own choice otherwise."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "artifacts").as_uri()
    return None


class MlflowLogger(Logger):
    name = "mlflow"
    defaults: ClassVar[dict[str, Any]] = {"tracking_uri": None, "experiment": "alilama"}
    requires = ("mlflow", "sqlalchemy", "alembic")
    extra = "mlflow"

    @classmethod
    def shared_options(cls, folder: str, study: str) -> dict[str, Any]:
        """One SQLite store ``folder/mlflow.db``, one experiment ``study`` holding every run."""
        return {"tracking_uri": f"sqlite:///{Path(folder).resolve() / 'mlflow.db'}", "experiment": study}

    def start(self, run: RunStart) -> dict[str, Any]:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        for noisy in ("mlflow.store.db.utils", "alembic.runtime.migration"):  # table creation, said at INFO
            logging.getLogger(noisy).setLevel(logging.WARNING)
        folder = log_dir(run, None)
        uri = run.state.get("tracking_uri") or self.options["tracking_uri"]
        given = bool(uri)
        if not given:  # the run's own store, found again from the run folder wherever it has moved
            folder.mkdir(parents=True, exist_ok=True)
            uri = f"sqlite:///{folder.resolve() / 'mlflow.db'}"
        client = MlflowClient(tracking_uri=uri)
        if uri.startswith(("http://", "https://")):
            reach_server(client, uri)  # before close() could wait on it too
        self.client = client
        self.run_id = run.state.get("run_id")
        if self.run_id is None:
            name = self.options["experiment"]
            found = client.get_experiment_by_name(name)
            artifacts = _artifacts_beside(uri)
            experiment = found.experiment_id if found else client.create_experiment(name, artifacts)
            self.run_id = client.create_run(experiment, run_name=run.name).info.run_id
            params = [Param(k, v[:MAX_PARAM]) for k, v in run_params(run).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                client.log_batch(self.run_id, params=params[i : i + 100])
        elif run.purpose == "train":
            client.update_run(self.run_id, status="RUNNING")
        self.pending: tuple[int, list[Any]] | None = None  # one step's metrics, written as one batch
        self.skip_through = -1
        if run.resumed_from is not None:  # steps the run lacks are replayed, those it holds skipped
            held = self._held_through()
            replay(self, run.history, held)
            self._write()
            self.skip_through = max(held, run.resumed_from)
        self.ended = run.purpose != "train"  # an evaluation leaves the run's status as it was
        return {"run_id": self.run_id, "tracking_uri": uri if given else None}

    def _held_through(self) -> int:
        """The last step this run already holds a metric at (``-1``: none)."""
        keys = self.client.get_run(self.run_id).data.metrics
        steps = [m.step for key in keys for m in self.client.get_metric_history(self.run_id, key)]
        return max(steps, default=-1)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Kept until the step changes, so a row's scalars and evaluation are one ``log_batch`` (one
        SQLite transaction: a kill leaves a step whole or absent)."""
        from mlflow.entities import Metric

        if step <= self.skip_through:
            return
        if self.pending is not None and self.pending[0] != step:
            self._write()
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, step) for k, v in scalars.items()]
        self.pending = (step, (self.pending[1] if self.pending else []) + metrics)

    def _write(self) -> None:
        if self.pending is not None:
            self.client.log_batch(self.run_id, metrics=self.pending[1])
            self.pending = None

    def flush(self) -> None:
        self._write()

    def log_samples(self, step: int, samples: list[str]) -> None:
        if step > self.skip_through:
            self.client.log_text(self.run_id, "\n\n".join(samples), f"samples/step-{step:08d}.txt")

    def end(self, summary: dict[str, Any], stopped: str | None) -> None:
        self._write()
        for key, value in describe_end(summary, stopped).items():
            self.client.set_tag(self.run_id, f"final.{key}", str(value))
        self.client.set_terminated(self.run_id, "FINISHED")
        self.ended = True

    def close(self) -> None:
        if getattr(self, "client", None) is None:
            return
        self._write()
        if not self.ended:
            self.client.set_terminated(self.run_id, "KILLED")  # interrupted: a resume sets it running again
        self.client = None
