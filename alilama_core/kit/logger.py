"""The conformance kit for a logger plugin (an experiment tracker, ``contracts.logger``)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from alilama_core.contracts.logger import Logger, RunStart, calls_of
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.registry import get_registry
from alilama_core.kit.common import Check, Subject, _fail, _refuses_unknown_option, _scope, _scoped, run_checks

ReadSteps = Callable[[Path, dict[str, Any]], list[int]]
"""``read_steps(run_dir, state)``: the steps at which the tracker holds ``train_loss``, in order, read
back with the tracker's own reader (``state``: what the logger's ``start`` returned)."""


def check_logger(
    logger: str | type,
    *,
    options: Mapping[str, Any] | None = None,
    read_steps: ReadSteps | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check a logger (registered name or ``Logger`` subclass) against its contract; the checks run.

    Checked: a ``Logger`` subclass whose library is installed; the whole life of a
    run (``start`` returning JSON-able state, scalars, evaluations, samples,
    ``flush``, ``end``, ``close``); an interrupted run (closed without ``end``,
    having logged one step past its last checkpoint) resumed from that
    checkpoint with its state; an evaluation added afterwards (``purpose="eval"``);
    ``close`` safe before ``start``; and an unknown option refused with
    ``ConfigError``. With ``read_steps`` the tracker's own files are read back after
    the resume: steps 1 to 4, each once. Run it from a plugin's tests::

        def test_my_logger():
            check_logger("my-tracker", options={"dir": str(tmp_path)})
    """
    return run_checks(logger_checks(logger, options=options, read_steps=read_steps, known_gaps=known_gaps))


def logger_checks(
    logger: str | type,
    *,
    options: Mapping[str, Any] | None = None,
    read_steps: ReadSteps | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[Check]:
    """The named checks of ``check_logger``, one ``Check`` each (see ``parametrize_with_checks``)."""
    name, scope = _scope("logger", logger)
    what = f"logger {name!r}"

    def cls() -> type[Logger]:  # built inside a check, where the name is registered already
        target = get_registry().get("logger", name)
        if not (isinstance(target, type) and issubclass(target, Logger)):
            raise _fail(what, f"registered object {target!r} is not a Logger subclass")
        target.check_available()
        return target

    def make() -> Logger:
        return subject.cls(dict(options or {}))

    def run_start(run_dir: Path, **changes: Any) -> RunStart:
        config = cfgmod.preset("tiny")
        return RunStart(
            run_dir=run_dir,
            dir=run_dir / "trackers" / name,
            name=run_dir.name,
            config=cfgmod.flat(config),
            parameters=1234,
            data={"data": str(run_dir / "data"), "task": None},
            **changes,
        )

    def started(logger: Logger, run: RunStart) -> dict[str, Any]:
        state = logger.start(run)
        if not isinstance(state, dict):
            raise _fail(what, f"start() must return a dict (its state for a resume), got {state!r}")
        try:
            json.dumps(state)
        except (TypeError, ValueError) as exc:
            raise _fail(what, f"start() must return JSON-able state (kept in run.json): {exc}") from None
        return state

    def row_of(step: int) -> dict[str, Any]:
        """The metrics row a trainer would log at ``step`` (an evaluation and samples every 2 steps)."""
        row: dict[str, Any] = {"step": step, "tokens": 64 * step, "lr": 1e-3, "train_loss": 3.0 / step}
        if step % 2 == 0:
            row.update(val_loss=3.1 / step, val_bpb=1.5 / step, samples=[f"Once upon a time {step}", "One day"])
        return row

    def log_step(logger: Logger, step: int) -> None:
        for method, args in calls_of(row_of(step)):
            getattr(logger, method)(*args)

    subject = Subject(tmp=tempfile.TemporaryDirectory, cls=cls)

    def contract() -> None:
        target = subject.cls
        if not isinstance(target.defaults, dict):
            raise _fail(what, f"defaults must be a dict of settings, got {target.defaults!r}")
        if target.requires and not target.extra:
            raise _fail(what, "a logger that requires packages must name the extra that installs them (extra)")

    def whole_run() -> None:
        run_dir = Path(subject.tmp.name) / "whole"
        logger = make()
        started(logger, run_start(run_dir))
        for step in range(1, 5):
            log_step(logger, step)
            if step % 2 == 0:
                logger.flush()
        logger.end({"step": 4, "val_loss": 0.8, "best_val_loss": 0.8, "best_step": 4}, None)
        logger.close()

    def resumed() -> None:
        run_dir = Path(subject.tmp.name) / "resumed"
        first = make()
        state = started(first, run_start(run_dir))
        for step in range(1, 4):  # a checkpoint at step 2, then one more step, then the process stops
            log_step(first, step)
            if step == 2:
                first.flush()
        first.close()
        again = make()
        history = [row_of(1), row_of(2)]
        state = started(again, run_start(run_dir, resumed_from=2, state=state, history=history))
        for step in (3, 4):
            log_step(again, step)
        again.flush()
        again.end({"step": 4}, "time budget")
        again.close()
        evaluation = make()
        started(evaluation, run_start(run_dir, state=state, purpose="eval"))
        evaluation.log_evaluation(4, {"eval/val/ctx16/loss": 2.0, "eval/val/ctx16/bpb": 1.0})
        evaluation.close()
        if read_steps is not None:
            steps = read_steps(run_dir, state)
            if steps != [1, 2, 3, 4]:
                raise _fail(
                    what,
                    "after a run interrupted past its checkpoint at step 2 and resumed, the tracker must hold "
                    f"train_loss at steps 1, 2, 3, 4, each once; it holds {steps}",
                )

    def close_first() -> None:
        try:
            make().close()
        except Exception as exc:
            raise _fail(
                what, f"close() before start() must do nothing, it raised {type(exc).__name__}: {exc}"
            ) from None

    def unknown_options() -> None:
        _refuses_unknown_option(what, lambda: subject.cls({"no_such_option": 1}), "train.logger_options")

    plan: list[tuple[str, Callable[[], None]]] = [
        ("contract", contract),
        ("a whole run", whole_run),
        ("interrupted, resumed, evaluated", resumed),
        ("close before start", close_first),
        ("unknown options", unknown_options),
    ]
    return [Check("logger", name, label, _scoped(scope, fn), gap=(known_gaps or {}).get(label)) for label, fn in plan]
