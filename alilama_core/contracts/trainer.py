"""What a trainer is: the ``Trainer`` contract."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

from alilama_core.contracts.options import check_options


class Trainer(abc.ABC):
    """Runs a training config to a run folder::

        trainer = registry.get_trainer("default")(config, echo=print, show_progress=False)
        result = trainer.fit(data_dir="data/", out_dir="runs/essay")

    This is everything ``alilama train`` and ``alilama quickstart`` call on a
    trainer: the constructor with its run control (``echo``, ``show_progress``)
    and ``fit`` with its arguments (``resume``, ``overwrite``, ``stop_at``).
    A subclass keeps these signatures; extra settings belong in the config.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    """The trainer's own settings and their default values; ``train.trainer_options``
    sets them, and the constructor checks them into ``self.options``."""

    def __init__(self, config: Any, echo: Callable[[str], None] = print, show_progress: bool = True) -> None:
        """``config``: the full ``Config``. ``echo``: where messages go (one string per call).
        ``show_progress``: draw a progress bar (else progress lines go to ``echo``)."""
        self.options: dict[str, Any] = self.check_options(config.train.trainer_options, config.train.trainer)
        self.config = config
        self.echo = echo
        self.show_progress = show_progress

    @classmethod
    def check_options(cls, options: dict[str, Any] | None, name: str = "") -> dict[str, Any]:
        """``defaults`` with ``options`` applied; an unknown key raises ``ConfigError``."""
        return check_options("trainer", name or cls.name or cls.__name__, cls.defaults, options)

    @abc.abstractmethod
    def fit(
        self,
        data_dir: str,
        out_dir: str,
        resume: bool = False,
        overwrite: bool = False,
        stop_at: int | None = None,
    ) -> dict[str, Any]:
        """Train on the prepared data in ``data_dir``; write the run folder ``out_dir``.

        ``resume``: continue the run in ``out_dir`` from its newest complete
        checkpoint (``self.config`` is its saved config with any overrides
        applied). ``overwrite``: replace an existing run that Alilama wrote.
        ``stop_at``: checkpoint and return after this step. Returns metrics:
        ``step`` always; ``val_loss``/``val_bpb`` when evaluated; ``interrupted``
        (a reason) when stopped early; ``finished`` when the run had already
        reached ``train.max_steps`` and nothing was trained.
        """
