"""What a trainer is: the ``Trainer`` contract, and the ``train.*`` settings it honours or refuses.

Every field of ``TrainConfig`` is in exactly one of four places (a test holds this):

- ``EVERY_TRAINER``: what every trainer honours; none may be refused;
- ``SETTINGS``: what a trainer either honours, declaring it in ``Trainer.supports``,
  or refuses: the base constructor raises ``ConfigError`` for a setting in use
  that the trainer does not declare, so nothing is ever silently ignored;
- ``CORE``: what the core does for every trainer (the run writer, the data
  source, the optimizer factory, the constructor);
- ``REPORTING``: what only changes what is printed or logged; a trainer may ignore it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from alilama_core.base.errors import ConfigError
from alilama_core.base.options import check_options


@dataclass(frozen=True)
class Setting:
    """A ``train.*`` setting that a trainer honours (``Trainer.supports``) or refuses."""

    name: str
    honour: str
    """What honouring it means."""
    idle: str
    """The values that ask nothing of a trainer, as the fix a refusal suggests."""
    in_use: Callable[[Any], bool] = field(repr=False)
    """Whether a ``TrainConfig`` asks for it."""
    probe: dict[str, Any] = field(default_factory=dict)
    """``train`` fields that put it in use (what the conformance kit tries)."""
    companions: tuple[str, ...] = ()
    """Fields that only mean something with it (they travel with its declaration)."""


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "device",
        "run on a CUDA GPU, and refuse cuda where there is none (cpu is honoured by every trainer; "
        "auto: a GPU when the trainer runs on one and there is one)",
        "train.device=cpu or auto",
        lambda t: t.device not in ("cpu", "auto"),
        {"device": "cuda"},
    ),
    Setting(
        "dtype",
        "bf16 autocast in the training forward passes",
        "train.dtype=float32",
        lambda t: t.dtype != "float32",
        {"dtype": "bfloat16"},
    ),
    Setting(
        "micro_batch_size",
        "forward passes of that many sequences, their gradients accumulated into one step of train.batch_size",
        "train.micro_batch_size=null",
        lambda t: t.micro_batch_size is not None,
        {"micro_batch_size": 2},
    ),
    Setting(
        "compile",
        "train through torch.compile(model)",
        "train.compile=false",
        lambda t: bool(t.compile),
        {"compile": True},
    ),
    Setting(
        "threads",
        "torch.set_num_threads(threads) while training",
        "train.threads=null",
        lambda t: t.threads is not None,
        {"threads": 1},
    ),
    Setting(
        "optimizer",
        "build the optimiser with build_optimizer(model, config.train) and set its learning rates with set_lr "
        "(alilama_core.contracts.optimizer)",
        "train.optimizer=adamw and no train.optimizer_options",
        lambda t: t.optimizer != "adamw" or bool(t.optimizer_options),
        {"optimizer": "muon"},
        ("optimizer_options", "muon_lr", "muon_momentum"),
    ),
    Setting(
        "grad_clip",
        "clip the gradients' global norm to it before each optimiser step",
        "train.grad_clip=null",
        lambda t: t.grad_clip is not None,
        {"grad_clip": 0.5},
    ),
    Setting(
        "warmup_steps",
        "raise the learning rate linearly to train.lr over that many steps",
        "train.warmup_steps=0",
        lambda t: t.warmup_steps > 0,
        {"warmup_steps": 2},
    ),
    Setting(
        "schedule",
        "wsd: after the warm-up, stable at train.lr, then linear down to train.min_lr over the last "
        "train.decay_share of training",
        "train.schedule=cosine",
        lambda t: t.schedule != "cosine",
        {"schedule": "wsd"},
        ("decay_share",),
    ),
    Setting(
        "max_time",
        "stop once that many seconds of training are spent (counted across resumes), with a last evaluation, "
        "checkpoint and final/; train.max_steps may then be null",
        "train.max_time=null, with train.max_steps",
        lambda t: t.max_time is not None,
        {"max_time": 3600.0},
        ("evals_per_budget",),
    ),
    Setting(
        "eval_every",
        "null: no evaluation by steps, only at the end and by the time budget (every trainer evaluates "
        "every N steps when it is an integer)",
        "train.eval_every=N",
        lambda t: t.eval_every is None,
        {"eval_every": None},
    ),
    Setting(
        "checkpoint_every",
        "null: no checkpoint by steps, only at the end and by the time budget (every trainer checkpoints "
        "every N steps when it is an integer)",
        "train.checkpoint_every=N",
        lambda t: t.checkpoint_every is None,
        {"checkpoint_every": None},
    ),
)
"""The settings a trainer honours or refuses, in the order the docs' table lists them."""

SETTING_NAMES = frozenset(s.name for s in SETTINGS)

EVERY_TRAINER: dict[str, str] = {
    "batch_size": "sequences per optimiser step",
    "max_steps": "the optimiser steps to train (an integer unless the trainer supports max_time)",
    "lr": "the peak learning rate",
    "min_lr": "where the cosine ends, at train.max_steps",
    "seed": "torch.manual_seed and the batch sampler's seed: runs repeat, and a resume is bit-identical",
}
"""What every trainer honours (and ``device=cpu``, ``eval_every`` and ``checkpoint_every`` when integers:
see ``SETTINGS``)."""

CORE: dict[str, str] = {
    "trainer": "which trainer the CLI constructs",
    "trainer_options": "checked into self.options by Trainer.__init__",
    "weight_decay": "read by the optimizer (adamw, muon) that build_optimizer builds",
    "beta1": "read by adamw (and muon's AdamW half)",
    "beta2": "read by adamw (and muon's AdamW half)",
    "eval_tokens": "read by DataSource.evaluate",
    "keep_last": "read by RunWriter.prune",
    "loggers": "started and fed by the RunWriter",
    "logger_options": "handed to the loggers by the RunWriter",
}
"""What the core does for every trainer."""

REPORTING: dict[str, str] = {
    "log_every": "how often a metrics row or a progress line is written",
    "sample_every": "how often text samples are generated",
    "sample_prompts": "the prompts of the samples",
    "sample_tokens": "the length of the samples",
}
"""What changes only what is printed or logged: a trainer may ignore it (say so in its docs)."""


def _show(value: Any) -> str:
    """A value as an override writes it (``null``, ``true``, ``bfloat16``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class Trainer(abc.ABC):
    """Runs a training config to a run folder::

        trainer = registry.get_trainer("default")(config, echo=print, show_progress=False)
        result = trainer.fit(data_dir="data/", out_dir="runs/essay")

    This is everything ``alilama train`` and ``alilama quickstart`` call on a
    trainer: the constructor with its run control (``echo``, ``show_progress``)
    and ``fit`` with its arguments (``resume``, ``overwrite``, ``stop_at``).
    A subclass keeps these signatures; extra settings belong in the config
    (``defaults``). It declares in ``supports`` which of ``SETTINGS`` it
    honours; the constructor refuses the others when a config uses them.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    """The trainer's own settings and their default values; ``train.trainer_options``
    sets them, and the constructor checks them into ``self.options``."""
    supports: ClassVar[frozenset[str]] = frozenset()
    """The ``SETTINGS`` this trainer honours, by name; the constructor refuses any other that is in use."""

    def __init__(self, config: Any, echo: Callable[[str], None] = print, show_progress: bool = True) -> None:
        """``config``: the full ``Config``. ``echo``: where messages go (one string per call).
        ``show_progress``: draw a progress bar (else progress lines go to ``echo``)."""
        self.options: dict[str, Any] = self.check_options(config.train.trainer_options, config.train.trainer)
        self.check_settings(config.train, config.train.trainer)
        self.config = config
        self.echo = echo
        self.show_progress = show_progress

    @classmethod
    def check_options(cls, options: dict[str, Any] | None, name: str = "") -> dict[str, Any]:
        """``defaults`` with ``options`` applied; an unknown key raises ``ConfigError``."""
        return check_options("trainer", name or cls.name or cls.__name__, cls.defaults, options)

    @classmethod
    def check_settings(cls, train: Any, name: str = "") -> None:
        """Raise ``ConfigError`` naming every setting of ``SETTINGS`` in use in ``train`` that ``supports`` lacks."""
        refused = [s for s in SETTINGS if s.name not in cls.supports and s.in_use(train)]
        if refused:
            what = "; ".join(f"train.{s.name}={_show(getattr(train, s.name))} ({s.honour})" for s in refused)
            fix = "; ".join(s.idle for s in refused)
            raise ConfigError(
                f"trainer {name or cls.name or cls.__name__!r} does not support {what}. Set {fix}, "
                "or choose a trainer that supports it (train.trainer; `alilama plugins` lists them)"
            )

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
        ``stop_at``: checkpoint and return after this step. A run that is not
        stopped early ends with the ``RunWriter``'s ``finish(model, state)``,
        which writes ``final/`` (``alilama train`` reports an error without it).
        Returns metrics:
        ``step`` always; ``val_loss``/``val_bpb`` when evaluated; ``interrupted``
        (a reason) when stopped early; ``finished`` when the run had already
        reached ``train.max_steps`` and nothing was trained.
        """
