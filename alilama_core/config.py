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
import re
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from alilama_core.errors import ConfigError
from alilama_core.files import atomic_write_text
from alilama_core.limits import MODEL_FIELDS, describe, json_depth, limit, nesting_problem

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

    def validate(self, check_plugins: bool = True) -> "ModelConfig":
        """Check values and the positional × attention pair; raise ``ConfigError`` naming the fix."""
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_mlp", "context_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        check_memory(self, 4, "its float32 weights")
        check_dimensions(self)
        if check_plugins:
            check_compatibility(self.positional, self.attention)
            check_plugin_options(self)
        return self


def estimate_parameters(m: ModelConfig) -> int:
    """An upper estimate of ``m``'s parameter count (a learned position table included), without building it."""
    d, f = m.d_model, m.d_mlp
    block = 4 * d * d + 2 * d * f + 4 * d + f + 4 * d  # attention, MLP, their biases, two norms
    return m.vocab_size * d + m.n_layers * block + m.context_length * d + 2 * d


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable``), or ``None`` when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(m: ModelConfig, bytes_per_parameter: int, what: str) -> None:
    """Refuse a model whose parameters alone would not fit in memory, before anything is allocated."""
    need = estimate_parameters(m) * bytes_per_parameter
    have = available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"this model (d_model={m.d_model}, n_layers={m.n_layers}, d_mlp={m.d_mlp}, vocab_size={m.vocab_size}) "
            f"has about {estimate_parameters(m):,} parameters; {what} need about {need / 2**30:,.1f} GiB but "
            f"{have / 2**30:,.1f} GiB of memory is available. Choose a smaller model"
        )


def check_dimensions(m: ModelConfig) -> None:
    """Refuse model dimensions past their documented limits (``alilama_core.limits``)."""
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
    trainer_options: dict[str, Any] = field(default_factory=dict)
    """The trainer's own settings (see its ``defaults``); unknown keys are an error."""

    def validate(self) -> "TrainConfig":
        for name in ("batch_size", "max_steps", "log_every", "eval_every", "checkpoint_every", "keep_last"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"train.{name} must be a positive integer, got {value!r}")
        if self.micro_batch_size is not None and (self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size):
            raise ConfigError(
                f"train.micro_batch_size ({self.micro_batch_size}) must divide train.batch_size ({self.batch_size})"
            )
        for name in ("lr", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip", "max_time"):
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
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"train.dtype must be float32 or bfloat16, got {self.dtype!r}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError(f"train.grad_clip must be positive or null, got {self.grad_clip}")
        return self


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
            from alilama_core.tasks import parse_lengths

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

    def validate(self, check_plugins: bool = True) -> "Config":
        self.model.validate(check_plugins)
        self.train.validate()
        self.task.validate()
        if check_plugins:  # the trainer checks its own settings before any work starts
            from alilama_core.registry import get_trainer

            get_trainer(self.train.trainer).check_options(self.train.trainer_options, self.train.trainer)
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # The essay's ~2M-parameter ALiBi GPT for TinyStories.
    "essay": {"model": {"attention": "sdpa"}},
    # The essay model without linear or norm biases: it exports exactly as transformers' MPT.
    "essay-nobias": {"model": {"attention": "sdpa", "bias": False, "norm_bias": False}},
    # Small enough for unit tests and CI.
    "tiny": {
        "model": dict(vocab_size=512, d_model=32, n_layers=2, n_heads=4, d_mlp=64, context_length=64),
        "train": dict(
            batch_size=8,
            max_steps=20,
            warmup_steps=2,
            eval_every=10,
            eval_tokens=2048,
            checkpoint_every=10,
            log_every=5,
            sample_tokens=16,
        ),
    },
}


def preset(name: str) -> Config:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(sorted(PRESETS))}")
    return from_dict(Config, PRESETS[name])


ESSAY_YAML_HEADER = """\
# The essay's model: a ~2.1M-parameter ALiBi GPT for TinyStories.
# Written from the `essay` preset by `make essay-config`; edit the preset, not this file.
#   alilama tokenizer train --input ../shared/data/tinystories/train.txt --vocab-size 4096 \\
#       --special '<|endoftext|>' --out runs/tok4096
#   alilama data prepare --input ../shared/data/tinystories/train.txt --tokenizer runs/tok4096 --out runs/ts
#   alilama train --config configs/essay.yaml --data runs/ts --out runs/essay
"""


def preset_yaml(name: str, header: str = "") -> str:
    """The YAML text of preset ``name`` (every field), after ``header``."""
    return header + yaml.safe_dump(to_dict(preset(name)), sort_keys=False)


def write_preset(name: str, path: str | os.PathLike[str]) -> None:
    """Write preset ``name`` as a full YAML config (``configs/essay.yaml`` is written this way)."""
    atomic_write_text(Path(path), preset_yaml(name, ESSAY_YAML_HEADER if name == "essay" else ""))


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


class _LimitError(ConfigError):
    """A config text over a bound of ``alilama_core.limits`` (never read as a plain string)."""


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys and reads ``1e-3`` as a number (YAML 1.2 style).

    It also bounds the document while composing it, before any value is built:
    its nodes counted with every alias expanded (``MAX_YAML_NODES``: an alias
    "bomb" of nested anchors is refused, not copied a billion times), its
    nesting depth (``MAX_NESTING_DEPTH``), and aliases that refer to themselves.
    Tags that build Python objects (``!!python/...``) are refused by ``SafeLoader``.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self._max_nodes, self._max_depth = limit("MAX_YAML_NODES"), limit("MAX_NESTING_DEPTH")
        self._sizes: dict[int, int] = {}  # id(node) -> nodes it stands for, aliases expanded
        self._depth = 0

    def compose_node(self, parent, index):
        line = self.peek_event().start_mark.line + 1
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:
                raise _LimitError(f"the alias on line {line} refers to a node that contains it; remove the cycle")
            return node
        self._depth += 1
        if self._depth > self._max_depth:
            raise _LimitError(
                f"the document nests more than {self._max_depth} levels deep (line {line}); "
                f"{describe('MAX_NESTING_DEPTH')}"
            )
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._sizes[id(c)] for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
        else:
            size = 1
        if size > self._max_nodes:
            raise _LimitError(
                f"the document expands to more than {self._max_nodes:,} values (aliases counted each time "
                f"they are used; line {line}): write the values out, or use fewer aliases; {describe('MAX_YAML_NODES')}"
            )
        self._sizes[id(node)] = size
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1}); give each key once")
            seen.add(key)
        return super().construct_mapping(node, deep)


def _refuse_tag(loader: _Loader, node) -> None:
    raise ConfigError(
        f"the tag {node.tag!r} (line {node.start_mark.line + 1}) is not allowed: a config holds plain "
        "mappings, lists, strings and numbers; remove the tag"
    )


_Loader.add_constructor(None, _refuse_tag)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _yaml(text: str) -> Any:
    # PyYAML's scanner looks far ahead inside nested [ and {, so their depth is checked on the text first.
    most = limit("MAX_NESTING_DEPTH")
    if json_depth(text, stop=most) > most:
        raise _LimitError(f"the document nests [ or {{ more than {most} levels deep; {describe('MAX_NESTING_DEPTH')}")
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def to_dict(cfg: Any) -> dict[str, Any]:
    return asdict(cfg)


def check_plugin_options(m: ModelConfig) -> None:
    """Let the positional scheme and the attention backend check their own settings."""
    from alilama_core.interfaces import attention_backend
    from alilama_core.registry import get_attention, get_positional

    get_positional(m.positional).check_options(m.positional_options, m.positional)
    attention_backend(get_attention(m.attention)).configured(m.attention_options)


def _upgrade_model(data: dict[str, Any]) -> dict[str, Any]:
    """Configs written before plugin settings had a home: ``rope_theta`` becomes rope's ``theta``."""
    if "rope_theta" not in data:
        return data
    data = dict(data)
    theta = data.pop("rope_theta")
    if data.get("positional", "alibi") == "rope":
        options = dict(data.get("positional_options") or {})
        options.setdefault("theta", theta)
        data["positional_options"] = options
    return data


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from nested ``data``; unknown keys raise ``ConfigError``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    if cls is ModelConfig:
        data = _upgrade_model(data)
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise ConfigError(
            f"unknown field(s) {', '.join(sorted(unknown))} in {where or cls.__name__}; valid: {', '.join(known)}"
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
    if typing.get_origin(tp) is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{path} must be a mapping of names to values, got {value!r}")
        return dict(value)
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
    size = p.stat().st_size
    if size > limit("MAX_CONFIG_BYTES"):
        raise ConfigError(
            f"config file {str(p)!r} has {size:,} bytes, too many for a config; {describe('MAX_CONFIG_BYTES')}"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not a text file (not UTF-8 at byte {exc.start})") from None
    if "\0" in text:
        raise ConfigError(f"config file {str(p)!r} is not a text file (it holds NUL bytes)")
    problem = nesting_problem(text) if p.suffix == ".json" else None
    if problem:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {problem}")
    try:
        data = json.loads(text) if p.suffix == ".json" else _yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid {p.suffix[1:] or 'YAML'}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"config file {str(p)!r}: {exc}") from None
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
        if item.startswith("-") and not sep:
            raise ConfigError(f"no such option: {item} (overrides look like section.field=value)")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.field=value, e.g. model.n_layers=4")
        try:
            value = _yaml(raw) if raw.strip() else ""
        except _LimitError as exc:
            raise ConfigError(f"override {item!r}: {exc}") from None
        except (yaml.YAMLError, ConfigError):
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
        if parts[-1] not in node and not (len(parts) > 1 and parts[-2].endswith("options")):
            raise ConfigError(f"override {item!r}: no field {parts[-1]!r}; valid: {', '.join(node)}")
        node[parts[-1]] = value
    return from_dict(type(cfg), data)
