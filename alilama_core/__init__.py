"""Alilama: the library (interfaces, plugin registry, configs, the model, runs on disk).

The public API (see docs/api.md)::

    from alilama_core import load_run, generate_text, evaluate_run

    run = load_run("runs/essay")                     # config, model, tokenizer
    print(generate_text(run, "Once upon a time", SamplingSettings(max_new_tokens=40)))
    rows = evaluate_run("runs/essay", ["val.txt"], [128, 256])

    model = build_model(preset("essay").model)       # a fresh model from a config

The command line lives in ``alilama_core.app`` on top of this library, which
imports nothing from it. Torch is imported only when a torch-backed name is
first used, so the CLI starts fast.
"""

from alilama_core.contracts.config import Config, ModelConfig
from alilama_core.base.errors import (
    AlilamaError,
    CheckpointError,
    ConfigError,
    PluginUnavailableError,
    TokenizerError,
    UnknownPluginError,
)
from alilama_core.contracts.hookspecs import hookimpl
from alilama_core.contracts.tokenizer import Tokenizer
from alilama_core.engine.configs import apply_overrides, preset


def _version() -> str:
    """The installed distribution's version (defined once, in pyproject.toml)."""
    from importlib import metadata

    try:
        return metadata.version("alilama")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "0+unknown"


__version__ = _version()

_LAZY = {
    "build_model": "alilama_core.engine.model",
    "GPT": "alilama_core.engine.model",
    "KVCache": "alilama_core.engine.cache",
    "PositionalScheme": "alilama_core.contracts.positional",
    "AttentionBackend": "alilama_core.contracts.attention",
    "Trainer": "alilama_core.contracts.trainer",
    "registry": "alilama_core.engine.registry",
    "Run": "alilama_core.runs.checkpoint",
    "load_run": "alilama_core.runs.checkpoint",
    "load_tokenizer": "alilama_core.runs.tokenizers",
    "save_tokenizer": "alilama_core.runs.tokenizers",
    "SamplingSettings": "alilama_core.engine.generation",
    "generate": "alilama_core.engine.generation",
    "generate_text": "alilama_core.engine.generation",
    "stream_text": "alilama_core.engine.generation",
    "EvalRow": "alilama_core.runs.evaluate",
    "evaluate_run": "alilama_core.runs.evaluate",
    "evaluate_tokens": "alilama_core.runs.evaluate",
    "testing": "alilama_core.kit",
    "kit": "alilama_core.kit",
}

__all__ = [
    "AlilamaError",
    "AttentionBackend",
    "CheckpointError",
    "Config",
    "ConfigError",
    "EvalRow",
    "GPT",
    "KVCache",
    "ModelConfig",
    "PluginUnavailableError",
    "PositionalScheme",
    "Run",
    "SamplingSettings",
    "Tokenizer",
    "TokenizerError",
    "Trainer",
    "UnknownPluginError",
    "apply_overrides",
    "build_model",
    "evaluate_run",
    "evaluate_tokens",
    "generate",
    "generate_text",
    "hookimpl",
    "load_run",
    "load_tokenizer",
    "preset",
    "save_tokenizer",
    "stream_text",
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return module if name in ("registry", "testing", "kit") else getattr(module, name)
    raise AttributeError(f"module 'alilama_core' has no attribute {name!r}")
