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

import dataclasses
import json
import os
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from alilama_core.errors import ConfigError
from alilama_core.files import atomic_write_text

T = TypeVar("T")


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
    """``auto`` picks per call: ``tiled`` for ALiBi on CPU, ``flash``/``flex`` on CUDA, else ``sdpa``."""
    dropout: float = 0.0
    bias: bool = True
    """Biases in the linear layers."""
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    init_std: float | None = None
    """``None``: Xavier-uniform for every matrix, as in the essay; a number: normal(0, std)."""

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self, check_plugins: bool = True) -> "ModelConfig":
        """Check values and the positional × attention pair; raise ``ConfigError`` naming the fix."""
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_mlp", "context_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if check_plugins:
            check_compatibility(self.positional, self.attention)
        return self


@dataclass
class TrainConfig:
    """How to train: optimiser, schedule, batches, evaluation and checkpoints."""

    batch_size: int = 32
    """Global batch: sequences per optimiser step, summed over processes and accumulation."""
    micro_batch_size: int | None = None
    """Sequences per forward pass and process (``None``: the whole share); the rest is accumulation."""
    max_steps: int = 2000
    max_time: float | None = None
    """Stop after this many seconds of training (a checkpoint is written)."""
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
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
    log_every: int = 10
    eval_every: int = 200
    eval_tokens: int = 65536
    """Val tokens per evaluation (non-overlapping windows); 0 evaluates all of them."""
    sample_every: int | None = None
    """Print and log samples every N steps (default: at every evaluation)."""
    sample_prompts: list[str] = field(default_factory=lambda: ["Once upon a time", "One day, a little"])
    sample_tokens: int = 48
    checkpoint_every: int = 500
    keep_last: int = 2
    trainer: str = "default"

    def validate(self) -> "TrainConfig":
        for name in ("batch_size", "max_steps", "log_every", "eval_every", "checkpoint_every", "keep_last"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"train.{name} must be a positive integer, got {value!r}")
        if self.micro_batch_size is not None and (self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size):
            raise ConfigError(
                f"train.micro_batch_size ({self.micro_batch_size}) must divide train.batch_size ({self.batch_size})"
            )
        if self.lr <= 0 or self.min_lr < 0 or self.min_lr > self.lr:
            raise ConfigError(f"need 0 <= train.min_lr <= train.lr and lr > 0, got lr={self.lr}, min_lr={self.min_lr}")
        if self.warmup_steps < 0:
            raise ConfigError(f"train.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"train.dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError(f"train.grad_clip must be positive or null, got {self.grad_clip}")
        return self


@dataclass
class Config:
    """The root config: the model and how to train it."""

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self, check_plugins: bool = True) -> "Config":
        self.model.validate(check_plugins)
        self.train.validate()
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # The essay's ~2M-parameter ALiBi GPT for TinyStories.
    "essay": {"model": {"attention": "sdpa"}},
    # Small enough for unit tests and CI.
    "tiny": {
        "model": dict(vocab_size=512, d_model=32, n_layers=2, n_heads=4, d_mlp=64, context_length=64),
        "train": dict(batch_size=8, max_steps=20, warmup_steps=2, eval_every=10, eval_tokens=2048,
                      checkpoint_every=10, log_every=5, sample_tokens=16),
    },
}


def preset(name: str) -> Config:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(sorted(PRESETS))}")
    return from_dict(Config, PRESETS[name])


def check_compatibility(positional: str, attention: str) -> None:
    """Raise ``ConfigError`` if the backend cannot take the scheme's positional information."""
    from alilama_core.interfaces import attention_backend
    from alilama_core.registry import get_registry

    reg = get_registry()
    scheme = reg.get("positional", positional)
    backend = attention_backend(reg.get("attention", attention))
    if not backend.supports(scheme):
        works = []
        for name in reg.names("attention"):
            try:
                if attention_backend(reg.get("attention", name)).supports(scheme):
                    works.append(name)
            except Exception:  # an unimportable backend simply is not suggested
                continue
        raise ConfigError(
            f"attention backend {attention!r} cannot apply positional scheme {positional!r} "
            f"(a {scheme.kind} scheme; {attention!r} accepts bias: {backend.bias}). "
            f"Backends that work with {positional!r}: {', '.join(works) or 'none'}."
        )


# -- (de)serialisation ---------------------------------------------------------------


def to_dict(cfg: Any) -> dict[str, Any]:
    return asdict(cfg)


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from nested ``data``; unknown keys raise ``ConfigError``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise ConfigError(
            f"unknown field(s) {', '.join(sorted(unknown))} in {where or cls.__name__}; "
            f"valid: {', '.join(known)}"
        )
    kwargs = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else name
        kwargs[name] = _coerce(hints[name], value, path)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{path}: invalid value {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path} must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path} must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path} must be a string, got {value!r}")
    if typing.get_origin(tp) is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_coerce(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def load(path: str | os.PathLike[str], cls: type[T] = Config) -> T:  # type: ignore[assignment]
    """Read a YAML (``.yaml``/``.yml``) or JSON config file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid {p.suffix[1:] or 'YAML'}: {exc}") from exc
    return from_dict(cls, data or {})


def save(cfg: Any, path: str | os.PathLike[str]) -> None:
    """Write ``cfg`` as YAML or JSON (by suffix), atomically."""
    p = Path(path)
    data = to_dict(cfg)
    text = json.dumps(data, indent=2) + "\n" if p.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    atomic_write_text(p, text)


def apply_overrides(cfg: T, overrides: list[str] | None) -> T:
    """Return a copy of ``cfg`` with ``section.field=value`` overrides applied."""
    data = to_dict(cfg)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.field=value, e.g. model.n_layers=4")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node.get(part), dict):
                raise ConfigError(
                    f"override {item!r}: {'.'.join(parts[: depth + 1])!r} is not a config section; "
                    f"sections: {', '.join(k for k, v in node.items() if isinstance(v, dict))}"
                )
            node = node[part]
        if parts[-1] not in node:
            raise ConfigError(
                f"override {item!r}: no field {parts[-1]!r}; valid: {', '.join(node)}"
            )
        node[parts[-1]] = value
    return from_dict(type(cfg), data)
