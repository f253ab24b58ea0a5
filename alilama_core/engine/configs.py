"""Configs from presets, YAML files and ``section.field=value`` overrides."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from alilama_core.contracts.config import Config, ModelConfig
from alilama_core.base.errors import ConfigError
from alilama_core.base.files import atomic_write_text
from alilama_core.base.limits import describe, json_depth, limit, nesting_problem

T = TypeVar("T")


PRESETS: dict[str, dict[str, Any]] = {
    # The essay's ~2M-parameter ALiBi GPT for TinyStories.
    "essay": {"model": {"attention": "sdpa"}},
    # The essay model without linear or norm biases: it exports exactly as transformers' MPT.
    "essay-nobias": {"model": {"attention": "sdpa", "bias": False, "norm_bias": False}},
    # The essay's model with the recipe the sweeps configs/sweeps/recipe-stage*.yaml chose on TinyStories
    # (docs/training.md):
    # Muon for the blocks' matrices, a warm-up/stable/decay schedule, AdamW at twice the essay's rate
    # for the rest. The essay's architecture, so it exports wherever the essay model does.
    "fast": {
        "model": {"attention": "sdpa"},
        "train": {"optimizer": "muon", "muon_lr": 0.02, "schedule": "wsd", "lr": 0.006, "min_lr": 0.0006},
    },
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


class _LimitError(ConfigError):
    """A config text over a bound of ``alilama_core.base.limits`` (never read as a plain string)."""


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


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """A config (or nested mapping) as ``{"section.field": value}``::

    >>> flat({"model": {"d_model": 128, "positional_options": {"theta": 1.0}}})
    {'model.d_model': 128, 'model.positional_options.theta': 1.0}
    """
    if not isinstance(data, dict):
        data = to_dict(data)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


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


def _in_options(parents: list[str]) -> bool:
    """Whether a key under ``parents`` lies inside a plugin's settings (any key is allowed there)."""
    return any(p.endswith("options") for p in parents)


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
            if part not in node and _in_options(parts[:depth]):
                node[part] = {}  # a plugin's settings under a ``*_options`` mapping (logger_options.wandb)
            if not isinstance(node.get(part), dict):
                raise ConfigError(
                    f"override {item!r}: {'.'.join(parts[: depth + 1])!r} is not a config section; "
                    f"sections: {', '.join(k for k, v in node.items() if isinstance(v, dict))}"
                )
            node = node[part]
        if parts[-1] not in node and not _in_options(parts[:-1]):
            raise ConfigError(f"override {item!r}: no field {parts[-1]!r}; valid: {', '.join(node)}")
        node[parts[-1]] = value
    return from_dict(type(cfg), data)


def resolve_config(config: str | None, preset_name: str | None, overrides: list[str] | None) -> Config:
    """Config from a file or a preset (default ``essay``), then overrides; checked as a command checks it
    (``validate.check_config``)."""
    from alilama_core.engine.validate import check_config  # the registry and plugins, only when asked

    if config and preset_name:
        raise ConfigError("give either --config or --preset, not both")
    cfg = load(config) if config else preset(preset_name or "essay")
    return check_config(apply_overrides(cfg, overrides))
