"""What a logger is: the ``Logger`` contract (an experiment tracker a run's metrics also go to).

A run always writes ``metrics.jsonl``; the loggers named in ``train.loggers``
receive the same rows, through the run's writer (``RunFolder``), so every
trainer logs the same way. The writer calls, on rank 0 only::

    state = logger.start(run)                 # once; ``run`` is a ``RunStart``
    logger.log_scalars(step, {"train_loss": 2.1, "lr": 3e-3, ...})   # each metrics row's numbers
    logger.log_evaluation(step, {"val_loss": 2.3, "val_bpb": 1.2})     # the row's ``val_*`` results
    logger.log_samples(step, ["Once upon a time ..."])                # the row's text samples
    logger.flush()                            # before each checkpoint: what is logged so far is durable
    logger.end(summary, stopped)              # once, when final/ is written
    logger.close()                            # always last (also after an interruption, without ``end``)

``start`` returns a small JSON-able state (a tracker's run id, its folder),
kept in ``run.json``; a resumed run hands it back in ``RunStart.state`` with
``RunStart.resumed_from``, the step of the checkpoint it continues from.
Everything logged up to that step was flushed; what was logged after it (the
steps the resumed run trains again) must not appear twice: a logger drops it
(TensorBoard's ``purge_step``, a rewritten file) or skips the steps it already
holds. A tracker that writes in the background (W&B) may hold fewer steps than
were flushed after a kill: ``RunStart.history`` has the run's rows up to the
checkpoint, and ``replay`` logs the ones it lacks. A logger that raises is
reported once and dropped; it never stops training. ``alilama eval --log``
reopens a run's loggers with ``purpose="eval"``: ``start``, ``log_evaluation``
at the evaluated checkpoint's step, ``flush``, ``close`` (no ``end``).
"""

from __future__ import annotations

import abc
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from alilama_core.base.errors import PluginUnavailableError
from alilama_core.base.options import check_options


SAMPLES = "samples"
EVALUATION_PREFIX = "val_"


def split_row(row: dict[str, Any]) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """A metrics row as (scalars, evaluation results, samples); ``step`` and non-numbers left out::

    >>> split_row({"step": 4, "train_loss": 2.5, "val_loss": 2.7, "samples": ["Once"]})
    ({'train_loss': 2.5}, {'val_loss': 2.7}, ['Once'])
    """
    scalars: dict[str, float] = {}
    evaluation: dict[str, float] = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        (evaluation if key.startswith(EVALUATION_PREFIX) else scalars)[key] = value
    samples = [s for s in row.get(SAMPLES) or [] if isinstance(s, str)]
    return scalars, evaluation, samples


@dataclass
class RunStart:
    """What a logger is told when a run (or an evaluation of it) starts."""

    run_dir: Path
    """The run folder; a logger writes its files under ``dir`` unless its options say elsewhere."""
    dir: Path
    """This logger's own folder in the run (``RUN/trackers/<name>``), not created yet."""
    name: str
    """The run's name (its folder's name): a tracker's run name."""
    config: dict[str, Any]
    """The run's config, flattened to ``{"section.field": value}`` (hyperparameters)."""
    parameters: int | None = None
    """The model's parameter count (``None`` when not known, e.g. for an evaluation)."""
    data: dict[str, Any] = field(default_factory=dict)
    """What the run trains on: ``data`` (a folder) or ``task`` (a task name), and the data's metadata."""
    resumed_from: int | None = None
    """A resumed run: the checkpoint step it continues after (steps past it may be logged again)."""
    state: dict[str, Any] = field(default_factory=dict)
    """What this logger's ``start`` returned for this run before (``{}`` the first time)."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """A resumed run: its metrics rows up to ``resumed_from``, for a tracker whose writes are not
    durable at ``flush`` (a background uploader) to replay the steps it lacks (``replay``)."""
    purpose: str = "train"
    """``train``, or ``eval`` when ``alilama eval --log`` adds its results to the run's trackers."""


class Logger(abc.ABC):
    """An experiment tracker: receives a run's hyperparameters, metrics, evaluations and samples.

    Options come from ``train.logger_options.<name>`` and are checked against
    ``defaults``. A logger whose library is optional names the modules it
    imports in ``requires`` and the Alilama extra that installs them in
    ``extra``: choosing it without them is refused before training starts.
    Import the library inside ``start``, never at module import time.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    """The logger's own settings and their defaults (``train.logger_options.<name>``)."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Modules the logger imports (checked before a run starts)."""
    extra: ClassVar[str] = ""
    """The ``alilama`` extra that installs ``requires`` (``pip install 'alilama[extra]'``)."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = self.check_options(options)

    @classmethod
    def check_options(cls, options: dict[str, Any] | None, name: str = "") -> dict[str, Any]:
        """``defaults`` with ``options`` applied; an unknown key raises ``ConfigError``."""
        return check_options("logger", name or cls.name or cls.__name__, cls.defaults, options)

    @classmethod
    def check_available(cls) -> None:
        """Raise ``PluginUnavailableError`` naming the extra to install when a required module is missing."""
        missing = [m for m in cls.requires if importlib.util.find_spec(m) is None]
        if missing:
            extra = cls.extra or cls.name
            raise PluginUnavailableError(
                f"logger {cls.name!r} needs the package(s) {', '.join(missing)}, which are not installed: "
                f"pip install 'alilama[{extra}]'"
            )

    @classmethod
    def shared_options(cls, folder: str, study: str) -> dict[str, Any] | None:
        """The options that log every run of a study into one experiment, to compare them side by side (what
        ``alilama sweep --logger NAME`` gives each trial): ``folder`` is the study's folder (absolute), ``study``
        its name. ``None`` (the default): this logger has no shared experiment, and a sweep refuses it."""
        return None

    @abc.abstractmethod
    def start(self, run: RunStart) -> dict[str, Any]:
        """Open (or, with ``run.state``, reopen) the tracker's run; return the state to keep for a resume."""

    @abc.abstractmethod
    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """One metrics row's numbers at ``step`` (``train_loss``, ``lr``, ``grad_norm``, ``tokens``, ...)."""

    def log_evaluation(self, step: int, results: dict[str, float]) -> None:
        """Evaluation results at ``step`` (``val_loss``, ``val_bpb``, a task's ``val_exact``, eval's per-length ones)."""
        self.log_scalars(step, results)

    def log_samples(self, step: int, samples: list[str]) -> None:  # noqa: B027 - an optional call: doing nothing is right
        """Text samples generated at ``step`` (default: not kept)."""

    def flush(self) -> None:  # noqa: B027 - an optional call: doing nothing is right
        """Make everything logged so far durable (called before each checkpoint)."""

    @abc.abstractmethod
    def end(self, summary: dict[str, Any], stopped: str | None) -> None:
        """The run ended: its final metrics, and why it stopped (``None``: it reached ``train.max_steps``)."""

    def close(self) -> None:  # noqa: B027 - an optional call: doing nothing is right
        """Release the tracker (called last, after ``end`` or after an interruption without it)."""


def calls_of(row: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """The logger calls one metrics row makes, as ``(method, args)``::

    >>> calls_of({"step": 4, "train_loss": 2.5, "val_loss": 2.7})
    [('log_scalars', (4, {'train_loss': 2.5})), ('log_evaluation', (4, {'val_loss': 2.7}))]
    """
    step = row["step"]
    parts = zip(("log_scalars", "log_evaluation", "log_samples"), split_row(row))
    return [(method, (step, values)) for method, values in parts if values]


def replay(logger: Logger, rows: list[dict[str, Any]], after: int) -> None:
    """Log ``rows`` past step ``after`` again through ``logger``'s own methods (see ``RunStart.history``)."""
    for row in rows:
        if row.get("step", 0) > after:
            for method, args in calls_of(row):
                getattr(logger, method)(*args)


def logger_class(target: Any, name: str) -> type[Logger]:
    """``target`` (a registered object) as a ``Logger`` subclass; a clear error otherwise."""
    if not (isinstance(target, type) and issubclass(target, Logger)):
        raise PluginUnavailableError(f"logger {name!r} is registered as {target!r}, which is not a Logger subclass")
    return target
