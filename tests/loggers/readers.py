"""Each tracker's files read with that tool's own reader: TensorBoard's ``EventAccumulator``, MLflow's
``MlflowClient``, W&B's offline transaction log (its protobuf records), and ``csv``."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

from alilama_loggers import wandb_files

NUMBERS = (int, float)


def metrics_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def metrics_series(run: Path) -> dict[str, list[tuple[int, float]]]:
    """``{key: [(step, value), ...]}`` of every number in metrics.jsonl (what each tracker must hold)."""
    out = defaultdict(list)
    for row in metrics_rows(run):
        for key, value in row.items():
            if key != "step" and isinstance(value, NUMBERS) and not isinstance(value, bool):
                out[key].append((row["step"], float(value)))
    return dict(out)


def state(run: Path, name: str) -> dict:
    return json.loads((run / "run.json").read_text())["loggers"][name]


def folder(run: Path, name: str) -> Path:
    return run / state(run, name)["dir"]


def tensorboard_series(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0}, purge_orphaned_data=True)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_client(run: Path):
    from mlflow.tracking import MlflowClient

    kept = state(run, "mlflow")
    uri = kept.get("tracking_uri") or f"sqlite:///{(run / 'trackers' / 'mlflow' / 'mlflow.db').resolve()}"
    return MlflowClient(tracking_uri=uri), kept["run_id"]


def mlflow_series(run: Path) -> dict[str, list[tuple[int, float]]]:
    client, run_id = mlflow_client(run)
    keys = client.get_run(run_id).data.metrics
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys}


def wandb_history(run: Path) -> list[dict]:
    kept = state(run, "wandb")
    files = wandb_files.run_files(run / kept["dir"], kept["id"])
    assert files, f"no offline W&B run {kept['id']} under {run / kept['dir']}"
    return [row for path in files for row in wandb_files.history(path)]


def wandb_series(run: Path) -> dict[str, list[tuple[int, float]]]:
    out = defaultdict(list)
    for row in wandb_history(run):
        for key, value in row.items():
            if not key.startswith("_") and isinstance(value, NUMBERS):
                out[key].append((row["_step"], float(value)))
    return dict(out)


def csv_series(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    out = defaultdict(list)
    with open(log_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            out[row["key"]].append((int(row["step"]), float(row["value"])))
    return dict(out)


def series(run: Path, name: str) -> dict[str, list[tuple[int, float]]]:
    """What the tracker ``name`` of ``run`` holds, ``{key: [(step, value), ...]}``."""
    if name == "tensorboard":
        return tensorboard_series(folder(run, name))
    if name == "mlflow":
        return mlflow_series(run)
    if name == "wandb":
        return wandb_series(run)
    return csv_series(folder(run, name))


def kit_steps(name: str):
    """A ``read_steps`` for ``check_logger``: the steps of ``train_loss`` in the kit's run, read back."""

    def read(run_dir: Path, kept: dict) -> list[int]:
        if name == "tensorboard":
            found = tensorboard_series(run_dir / kept["dir"])
        elif name == "csv":
            found = csv_series(run_dir / kept["dir"])
        elif name == "wandb":
            paths = wandb_files.run_files(run_dir / kept["dir"], kept["id"])
            return [r["_step"] for p in paths for r in wandb_files.history(p) if "train_loss" in r]
        else:
            from mlflow.tracking import MlflowClient

            uri = f"sqlite:///{(run_dir / 'trackers' / 'mlflow' / 'mlflow.db').resolve()}"
            history = MlflowClient(tracking_uri=uri).get_metric_history(kept["run_id"], "train_loss")
            return [m.step for m in sorted(history, key=lambda m: m.step)]
        return [step for step, _ in found["train_loss"]]

    return read
