"""What a trainer writes a run folder through: the ``RunWriter`` contract.

The run folder's format (``config.yaml``, ``run.json``, ``tokenizer/``,
``step-XXXXXXXX/`` and ``final/`` checkpoints with their ``state.json``,
``metrics.jsonl``) belongs to the core: ``alilama_core.runs.checkpoint`` reads
it and ``alilama_core.runs.writer.RunFolder`` writes it. A trainer owns only its
loop, and calls::

    writer = RunFolder(out_dir, config, trainer.name, echo=trainer.echo)
    writer.precheck(data_dir, resume=resume, overwrite=overwrite)   # before anything is written
    with writer.held():                                  # the run's lock, and a clear full-disk error
        source = open_data_source(config, data_dir)      # a DataSource (contracts.data)
        model, optimizer, rng = ...                      # seeded by the trainer
        state = writer.begin(source, model, optimizer, resume=resume, overwrite=overwrite)
        if writer.finished is not None:                  # resumed a run that had reached max_steps
            return writer.finished
        step = state["step"] if state else 0             # and rng.bit_generator.state = state["sampler"]
        ...
        writer.log({"step": step, ...})                  # one metrics.jsonl row
        writer.save_checkpoint(step, model, optimizer, {"step": ..., "tokens": ..., "best": ..., "sampler": ...})
        writer.prune(best_step)                          # keep train.keep_last, and the best
        writer.finish(model, state)                      # final/

A checkpoint's state holds at least ``step``, ``tokens``, ``best`` (``{"val_loss",
"step"}``) and ``sampler`` (the state of the trainer's ``numpy`` bit generator);
``save_checkpoint`` keeps the optimizer's state and ``torch``'s global RNG state
beside it, and ``begin`` on resume restores all three, so a resumed run goes on
exactly as an uninterrupted one would.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from alilama_core.contracts.data import DataSource


@runtime_checkable
class RunWriter(Protocol):
    path: Path
    record: dict[str, Any]
    """The run.json record being kept."""
    finished: dict[str, Any] | None
    """After ``begin``: the result to return when the resumed run had already finished, else ``None``."""

    def precheck(self, data_dir: str | Path, *, resume: bool, overwrite: bool) -> None:
        """Cheap checks before anything is written (a resume of no run, an output that may not be replaced)."""

    def held(self) -> AbstractContextManager[None]:
        """The run folder's exclusive lock for the whole training, and a clear error on a full disk."""

    def begin(
        self, source: DataSource, model: Any, optimizer: Any, *, resume: bool, overwrite: bool, barrier: Any = None
    ) -> dict[str, Any] | None:
        """Create the run folder (or reopen it to resume); the resumed checkpoint's state, else ``None``."""

    def log(self, row: dict[str, Any]) -> None:
        """Append one row (with ``step``) to metrics.jsonl, and hand it to the run's loggers
        (``train.loggers``, see ``contracts.logger``): its numbers, its ``val_*`` results, its ``samples``."""

    def save_checkpoint(self, step: int, model: Any, optimizer: Any, state: dict[str, Any]) -> Path:
        """Write ``step-XXXXXXXX/`` whole or not at all (the loggers are flushed first)."""

    def prune(self, best_step: int | None) -> None:
        """Drop step checkpoints past ``train.keep_last``, keeping the best one."""

    def finish(self, model: Any, state: dict[str, Any]) -> Path:
        """Write ``final/`` (weights and state, no optimizer); the loggers' ``end`` gets the final metrics
        and ``state["stopped"]``."""

    def close(self) -> None:
        """Close metrics.jsonl and the loggers."""
