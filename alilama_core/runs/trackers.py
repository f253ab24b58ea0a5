"""A run's experiment trackers: the loggers of ``train.loggers``, fed by the run's writer.

``Trackers`` makes every call of the ``Logger`` contract (``contracts.logger``):
it splits each metrics row into scalars, evaluation results (``val_*``) and
text samples, keeps what each logger's ``start`` returns (its tracker run id)
in ``run.json`` under ``loggers``, and turns a logger that raises into one
``AlilamaWarning``, after which that logger is dropped for the rest of the run.
Nothing a logger does can stop training or keep a row out of ``metrics.jsonl``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from alilama_core.base.errors import AlilamaWarning
from alilama_core.contracts.logger import Logger, RunStart, calls_of
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.validate import check_loggers

TRACKERS = "trackers"
"""The folder of a run that holds each logger's own files by default (``RUN/trackers/<name>``)."""
STATE = "loggers"
"""The ``run.json`` key that keeps each logger's state (``{name: state}``)."""


def build_loggers(config) -> dict[str, Logger]:
    """The loggers ``config.train.loggers`` names, constructed with their options (checked first)."""
    tcfg = config.train
    return {name: cls(tcfg.logger_options.get(name)) for name, cls in check_loggers(tcfg).items()}


class Trackers:
    """Every logger of a run, called together; one that raises is warned about once and dropped."""

    def __init__(self, loggers: dict[str, Logger]) -> None:
        self.active: dict[str, Logger] = dict(loggers)
        self.failed: list[str] = []

    @classmethod
    def from_config(cls, config) -> Trackers:
        return cls(build_loggers(config))

    def __bool__(self) -> bool:
        return bool(self.active)

    def start(
        self,
        run_dir: Path,
        config,
        *,
        parameters: int | None = None,
        data: dict[str, Any] | None = None,
        resumed_from: int | None = None,
        states: dict[str, Any] | None = None,
        history: list[dict[str, Any]] | None = None,
        purpose: str = "train",
    ) -> dict[str, dict[str, Any]]:
        """Start every logger; the states to keep in ``run.json`` (those given, updated by each logger)."""
        run_dir = Path(run_dir)
        kept = {name: dict(state) for name, state in (states or {}).items() if isinstance(state, dict)}
        hyper = cfgmod.flat(config)
        for name in list(self.active):
            run = RunStart(
                run_dir=run_dir,
                dir=run_dir / TRACKERS / name,
                name=run_dir.resolve().name,
                config=hyper,
                parameters=parameters,
                data=dict(data or {}),
                resumed_from=resumed_from,
                state=dict(kept.get(name, {})),
                history=list(history or []),
                purpose=purpose,
            )
            state = self._call(name, "start", run)
            if name in self.active and isinstance(state, dict):
                kept[name] = state
        return kept

    def log(self, row: dict[str, Any]) -> None:
        """One metrics row, split into the contract's three calls."""
        if not self.active:
            return
        calls = calls_of(row)
        for name in list(self.active):
            for method, args in calls:
                if name in self.active:  # one that failed on this row is not called again
                    self._call(name, method, *args)

    def evaluation(self, step: int, results: dict[str, float]) -> None:
        for name in list(self.active):
            self._call(name, "log_evaluation", step, results)

    def flush(self) -> None:
        for name in list(self.active):
            self._call(name, "flush")

    def end(self, summary: dict[str, Any], stopped: str | None) -> None:
        for name in list(self.active):
            self._call(name, "end", summary, stopped)

    def close(self) -> None:
        for name in list(self.active):
            self._call(name, "close")
        self.active = {}

    def _call(self, name: str, method: str, *args: Any) -> Any:
        logger = self.active[name]
        try:
            return getattr(logger, method)(*args)
        except Exception as exc:  # a tracker never stops training: reported once, then switched off
            del self.active[name]
            self.failed.append(name)
            if method != "close":
                try:
                    logger.close()
                except Exception:  # already reported; nothing more to say about it
                    pass
            warnings.warn(
                AlilamaWarning(
                    f"logger {name!r} failed in {method}() ({type(exc).__name__}: {exc}); it is switched off for "
                    "the rest of this run, which goes on (metrics.jsonl keeps every row)"
                ),
                stacklevel=2,
            )
            return None


def summary_of(state: dict[str, Any], last_eval: dict[str, Any] | None = None) -> dict[str, Any]:
    """The final metrics a logger's ``end`` receives: the final state's numbers and the last evaluation."""
    out = {k: state[k] for k in ("step", "tokens", "time_s") if k in state}
    best = state.get("best") or {}
    if best.get("val_loss") is not None:
        out["best_val_loss"], out["best_step"] = best["val_loss"], best["step"]
    out.update(last_eval or {})
    return out


def log_to_run_trackers(run_dir: str | Path, checkpoint: str | Path, results: dict[str, float]) -> list[str]:
    """Add evaluation ``results`` of the checkpoint folder ``checkpoint`` to the trackers of the run in
    ``run_dir`` (its ``train.loggers``, reopened with the states ``run.json`` kept), at that checkpoint's
    step; the names of the loggers that took them (``alilama eval --log``)."""
    import json

    from alilama_core.runs.checkpoint import CONFIG, read_run_json
    from alilama_core.runs.checkpoint import STATE as STATE_JSON

    run_dir = Path(run_dir)
    config = cfgmod.load(run_dir / CONFIG)
    trackers = Trackers.from_config(config)
    if not trackers:
        return []
    step = int(json.loads((Path(checkpoint) / STATE_JSON).read_text(encoding="utf-8"))["step"])
    record = read_run_json(run_dir)
    names = list(trackers.active)
    try:
        data = {k: record.get(k) for k in ("data", "task", "data_meta")}
        trackers.start(run_dir, config, data=data, states=record.get(STATE), purpose="eval")
        trackers.evaluation(step, results)
        trackers.flush()
    finally:
        trackers.close()
    return [n for n in names if n not in trackers.failed]
