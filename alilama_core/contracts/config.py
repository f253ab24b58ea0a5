"""Configs as plain dataclasses: plugin choices are string names, so a config is data.

A config saves to and loads from YAML or JSON, and any field can be overridden
with ``section.field=value`` (the value is read as YAML, so ``4``, ``0.1``,
``true`` and ``alibi`` all mean what they look like)::

    >>> cfg = preset("essay")
    >>> cfg = apply_overrides(cfg, ["model.n_layers=4", "model.positional=rope"])
    >>> cfg.model.n_layers, cfg.model.positional
    (4, 'rope')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from alilama_core.base.errors import ConfigError
from alilama_core.base.limits import MODEL_FIELDS, describe, limit
from alilama_core.contracts.task import parse_lengths


@dataclass
class ModelConfig:
    """The model's shape and its plugin choices (registry names)."""

    vocab_size: int = 4096
    d_model: int = 128
    n_layers: int = 8
    n_heads: int = 8
    d_mlp: int = 512
    context_length: int = 128
    positional: str = "alibi"
    attention: str = "auto"
    """``auto`` chooses per shape class (decode, short, long) among the registered backends by their
    declared capabilities and priority (``alilama model info`` shows its choices)."""
    dropout: float = 0.0
    bias: bool = True
    """Biases in the linear layers."""
    norm_bias: bool = True
    """Biases (shifts) in the LayerNorms; without them and ``bias`` an ALiBi model exports as MPT."""
    norm_eps: float = 1e-5
    init_std: float | None = None
    """``None``: Xavier-uniform for every matrix, as in the essay; a number: normal(0, std)."""
    activation: str = "gelu"
    """The MLP's nonlinearity: ``gelu`` (exact, erf; the essay's) or ``relu2`` (ReLU squared, So et al. 2021)."""
    qk_norm: bool = False
    """Normalise each head's queries and keys (RMSNorm with a learned gain per head dim) before positions
    and attention, as the nanoGPT speedrun, OLMo 2 and Qwen 3 do; the essay has none."""
    tie_embeddings: bool = True
    """The output head shares the token embedding's weights (the essay's); ``false``: a head of its own."""
    positional_options: dict[str, Any] = field(default_factory=dict)
    """The positional scheme's own settings, e.g. ``{theta: 500000.0}`` for rope (see its ``defaults``)."""
    attention_options: dict[str, Any] = field(default_factory=dict)
    """The attention backend's own settings (see its ``defaults``)."""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def rope_theta(self) -> float:
        """RoPE's ``theta`` (``positional_options["theta"]``, default 10000); kept for readers of older code."""
        return float(self.positional_options.get("theta", 10000.0))

    def validate(self) -> "ModelConfig":
        """Check the values (types, ranges, limits); raise ``ConfigError`` naming the fix.

        What needs the plugins (the positional × attention pair, their options)
        and the machine (memory) is checked once, when a model is built
        (``alilama_core.engine.validate.check_model``).
        """
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_mlp", "context_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"model.activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r} "
                "(e.g. model.activation=relu2)"
            )
        check_dimensions(self)
        return self


ACTIVATIONS = ("gelu", "relu2")
"""``model.activation``'s values (the functions: ``alilama_core.engine.model.ACTIVATION``)."""


def estimate_parameters(m: ModelConfig) -> int:
    """An upper estimate of ``m``'s parameter count (a learned position table included), without building it."""
    d, f = m.d_model, m.d_mlp
    block = 4 * d * d + 2 * d * f + 4 * d + f + 4 * d + 2 * (d // m.n_heads)  # attention, MLP, biases, norms
    head = 0 if m.tie_embeddings else m.vocab_size * d
    return m.vocab_size * d + head + m.n_layers * block + m.context_length * d + 2 * d


def check_dimensions(m: ModelConfig) -> None:
    """Refuse model dimensions past their documented limits (``alilama_core.base.limits``)."""
    for name, key in MODEL_FIELDS.items():
        value = getattr(m, name)
        if value > limit(key):
            raise ConfigError(f"model.{name}={value:,} is over its limit: {describe(key)}")


@dataclass
class TrainConfig:
    """How to train: optimiser, schedule, batches, evaluation and checkpoints."""

    batch_size: int = 32
    """Global batch: sequences per optimiser step, summed over processes and accumulation."""
    micro_batch_size: int | None = None
    """Sequences per forward pass and process (``None``: the whole share); the rest is accumulation."""
    max_steps: int | None = 2000
    """Optimiser steps to train; ``null`` with ``train.max_time``: as many as the time budget allows."""
    max_time: float | None = None
    """A time budget in seconds of training (counted across resumes): the run stops when it is spent,
    with a last evaluation and checkpoint at that step; the default trainer lays its schedule over it
    (warm-up ends within a tenth of it, the cosine reaches ``min_lr`` at its end)."""
    evals_per_budget: int = 4
    """With ``train.max_time``: also evaluate, sample and checkpoint each time another 1/N of the budget
    is spent, whatever the step rate (0: by steps only)."""
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
    schedule: str = "cosine"
    """After warm-up: ``cosine`` (decay to ``min_lr`` at the end) or ``wsd`` (warm-up, stable at ``lr``, then a
    linear decay to ``min_lr`` over the last ``train.decay_share`` of the steps or the time budget)."""
    decay_share: float = 0.2
    """With ``train.schedule=wsd``: the share of training spent decaying."""
    optimizer: str = "adamw"
    """A registered optimizer (``alilama plugins``): ``adamw`` for every weight, or ``muon``: Muon
    (``torch.optim.Muon``, orthogonalised momentum) for the blocks' matrices and AdamW for the embeddings,
    norms and biases, as the nanoGPT speedrun does; a plugin's (``contracts.optimizer``) by its name."""
    optimizer_options: dict[str, Any] = field(default_factory=dict)
    """The optimizer's own settings (see its ``defaults``), e.g. ``{beta2: 0.98}``; unknown keys are an error."""
    muon_lr: float = 0.02
    """With ``train.optimizer=muon``: Muon's peak learning rate (the schedule scales it as it scales ``lr``)."""
    muon_momentum: float = 0.95
    weight_decay: float = 0.1
    """Applied to matrices only (not to biases, norms or embeddings' tied copy twice)."""
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float | None = 1.0
    seed: int = 1337
    dtype: str = "float32"
    """``float32`` or ``bfloat16`` (autocast)."""
    compile: bool = False
    device: str = "auto"
    threads: int | None = None
    """CPU threads torch uses per process (``None``: the physical cores this process may run on,
    divided among the processes of a machine under torchrun); ``--threads`` sets it."""
    log_every: int = 10
    eval_every: int | None = 200
    """Evaluate (and sample) every N steps; ``null``: only by the time budget and at the end."""
    eval_tokens: int = 65536
    """Val tokens per evaluation (non-overlapping windows); 0 evaluates all of them."""
    sample_every: int | None = None
    """Print and log samples every N steps (default: at every evaluation)."""
    sample_prompts: list[str] = field(default_factory=lambda: ["Once upon a time", "One day, a little"])
    sample_tokens: int = 48
    checkpoint_every: int | None = 500
    """Checkpoint every N steps; ``null``: only by the time budget, at a new best and at the end."""
    keep_last: int = 2
    trainer: str = "default"
    trainer_options: dict[str, Any] = field(default_factory=dict)
    """The trainer's own settings (see its ``defaults``); unknown keys are an error."""
    loggers: list[str] = field(default_factory=list)
    """Experiment trackers that also receive the metrics, e.g. ``[tensorboard, csv]`` (``alilama plugins``
    lists them: csv, tensorboard, wandb, mlflow); ``metrics.jsonl`` is always written."""
    logger_options: dict[str, Any] = field(default_factory=dict)
    """Each logger's own settings by its name, e.g. ``{wandb: {project: stories}}`` (see its ``defaults``)."""

    def validate(self) -> "TrainConfig":
        if self.max_steps is None and self.max_time is None:
            raise ConfigError(
                "train.max_steps is null, so training needs a time budget: set train.max_time (seconds), "
                "or give train.max_steps, e.g. train.max_steps=2000"
            )
        for name in ("batch_size", "max_steps", "log_every", "eval_every", "checkpoint_every", "keep_last"):
            value = getattr(self, name)
            if value is None and name in ("max_steps", "eval_every", "checkpoint_every"):
                continue
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"train.{name} must be a positive integer, got {value!r}")
        if self.micro_batch_size is not None and (self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size):
            raise ConfigError(
                f"train.micro_batch_size ({self.micro_batch_size}) must divide train.batch_size ({self.batch_size})"
            )
        for name in ("lr", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip", "max_time", "muon_lr",
                     "muon_momentum", "decay_share"):  # fmt: skip
            value = getattr(self, name)
            if value is None and name in ("grad_clip", "max_time"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or value != value
                or abs(value) == float("inf")
            ):
                default = 3600 if name == "max_time" else TrainConfig.__dataclass_fields__[name].default
                raise ConfigError(
                    f"train.{name} must be a finite number, got {value!r}; set e.g. train.{name}={default}"
                    + (" (or null)" if name in ("grad_clip", "max_time") else "")
                )
        if self.lr <= 0 or self.min_lr < 0 or self.min_lr > self.lr:
            raise ConfigError(f"need 0 <= train.min_lr <= train.lr and lr > 0, got lr={self.lr}, min_lr={self.min_lr}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"train.seed must be an integer >= 0, got {self.seed!r} (e.g. train.seed=1337)")
        if self.warmup_steps < 0:
            raise ConfigError(f"train.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.schedule not in ("cosine", "wsd"):
            raise ConfigError(f"train.schedule must be cosine or wsd, got {self.schedule!r}")
        if not 0 < self.decay_share <= 1:
            raise ConfigError(f"train.decay_share must be in (0, 1], got {self.decay_share} (e.g. 0.2)")
        if not isinstance(self.optimizer, str) or not self.optimizer:
            raise ConfigError(f"train.optimizer must name a registered optimizer, e.g. adamw, got {self.optimizer!r}")
        if not isinstance(self.optimizer_options, dict):
            raise ConfigError(
                f"train.optimizer_options must be a mapping of the optimizer's settings, e.g. "
                f"train.optimizer_options.beta2=0.98, got {self.optimizer_options!r}"
            )
        if self.muon_lr <= 0 or not 0 <= self.muon_momentum < 1:
            raise ConfigError(
                f"need train.muon_lr > 0 and 0 <= train.muon_momentum < 1, got {self.muon_lr}, {self.muon_momentum}"
            )
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise ConfigError(
                f"train.threads must be a positive integer or null (the default: one per physical core), "
                f"got {self.threads!r} (e.g. train.threads=4)"
            )
        check_loggers_listed(self.loggers, self.logger_options)
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"train.dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError(f"train.grad_clip must be positive or null, got {self.grad_clip}")
        if self.max_time is not None and self.max_time <= 0:
            raise ConfigError(f"train.max_time must be a positive number of seconds or null, got {self.max_time}")
        if (
            isinstance(self.evals_per_budget, bool)
            or not isinstance(self.evals_per_budget, int)
            or self.evals_per_budget < 0
        ):
            raise ConfigError(f"train.evals_per_budget must be an integer >= 0, got {self.evals_per_budget!r}")
        return self


def check_loggers_listed(loggers: list[str], options: dict[str, Any]) -> None:
    """``train.loggers`` is a list of distinct names and ``train.logger_options`` maps names to mappings."""
    if not isinstance(loggers, list) or not all(isinstance(n, str) and n for n in loggers):
        raise ConfigError(f"train.loggers must be a list of logger names, e.g. [tensorboard, csv], got {loggers!r}")
    repeated = sorted({n for n in loggers if loggers.count(n) > 1})
    if repeated:
        raise ConfigError(f"train.loggers names {', '.join(repeated)} more than once; name each logger once")
    for name, value in options.items():
        if not isinstance(value, dict):
            raise ConfigError(
                f"train.logger_options.{name} must be a mapping of that logger's settings, e.g. "
                f"train.logger_options.{name}.dir=PATH, got {value!r}"
            )


@dataclass
class TaskConfig:
    """An algorithmic task to train on instead of prepared text (``name`` empty: none)."""

    name: str = ""
    """A registered task (``alilama tasks list``): copy, reverse, sort, addition, recall, parity, ..."""
    lengths: str | int = "1-16"
    """Example lengths to train on, drawn uniformly: ``lo-hi`` or one length."""
    seed: int = 0
    """Seed of the fixed validation and test sets (the training stream follows ``train.seed``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The task's own options, e.g. ``{symbols: 20}``; unknown keys are an error."""
    val_examples: int = 256

    def validate(self) -> "TaskConfig":
        if self.name:
            parse_lengths(self.lengths)
            if not isinstance(self.options, dict):
                raise ConfigError(f"task.options must be a mapping, e.g. {{symbols: 20}}, got {self.options!r}")
            if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
                raise ConfigError(f"task.seed must be an integer >= 0, got {self.seed!r} (e.g. task.seed=0)")
            if isinstance(self.val_examples, bool) or not isinstance(self.val_examples, int) or self.val_examples < 1:
                raise ConfigError(
                    f"task.val_examples must be a positive integer (validation examples per evaluation), "
                    f"got {self.val_examples!r} (e.g. task.val_examples=256)"
                )
            if self.val_examples > limit("MAX_TASK_EXAMPLES"):
                raise ConfigError(
                    f"task.val_examples={self.val_examples:,} is over its limit: {describe('MAX_TASK_EXAMPLES')}"
                )
        return self


@dataclass
class Config:
    """The root config: the model and how to train it."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)

    def validate(self) -> "Config":
        """Check every section's values (the plugins check theirs: ``alilama_core.engine.validate``)."""
        self.model.validate()
        self.train.validate()
        self.task.validate()
        return self
