"""What the built-in loggers share: where a logger writes, and values as text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alilama_core.contracts.logger import RunStart


def log_dir(run: RunStart, option: str | None) -> Path:
    """A logger's folder: the one its state kept (a resumed run), else ``option/<run name>`` (one
    folder for many runs, side by side), else its own folder in the run (``RUN/trackers/<name>``)."""
    kept = run.state.get("dir")
    if kept:
        return Path(run.run_dir) / kept  # kept relative to the run when inside it, so the run can move
    return Path(option).expanduser() / run.name if option else run.dir


def dir_state(run: RunStart, folder: Path) -> dict[str, str]:
    """``{"dir": ...}`` for a logger's state: relative to the run folder when inside it, else absolute."""
    try:
        return {"dir": str(Path(folder).resolve().relative_to(Path(run.run_dir).resolve()))}
    except ValueError:
        return {"dir": str(Path(folder).resolve())}


def as_text(value: Any) -> str:
    """A setting as one line of text (lists and ``None`` as YAML would write them)."""
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(as_text(v) for v in value) + "]"
    return str(value)


def run_params(run: RunStart) -> dict[str, str]:
    """The hyperparameters a tracker records: the flattened config, the parameter count and the data."""
    params = {key: as_text(value) for key, value in run.config.items()}
    if run.parameters is not None:
        params["model.parameters"] = str(run.parameters)
    for key in ("data", "task"):
        if run.data.get(key):
            params[f"data.{key}"] = as_text(run.data[key])
    return params


def describe_end(summary: dict[str, Any], stopped: str | None) -> dict[str, Any]:
    """``summary`` with why the run stopped (``max_steps`` when it trained to the end)."""
    return {**summary, "stopped": stopped or "max_steps"}
