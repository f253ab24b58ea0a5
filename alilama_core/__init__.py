"""Alilama core: interfaces, plugin registry, configs, the model, and the CLI.

The public API::

    from alilama_core import ModelConfig, build_model, KVCache, hookimpl

Torch is imported only when a torch-backed name (``build_model``, ``GPT``,
``KVCache``, the interfaces) is first used, so the CLI starts fast.
"""

from alilama_core.config import Config, ModelConfig, apply_overrides, preset
from alilama_core.errors import (
    AlilamaError,
    CheckpointError,
    ConfigError,
    PluginUnavailableError,
    TokenizerError,
    UnknownPluginError,
)
from alilama_core.hookspecs import hookimpl
from alilama_core.tokenizer import Tokenizer

__version__ = "0.1.0"

_LAZY = {
    "build_model": "alilama_core.model",
    "GPT": "alilama_core.model",
    "KVCache": "alilama_core.model",
    "PositionalScheme": "alilama_core.interfaces",
    "AttentionBackend": "alilama_core.interfaces",
    "Trainer": "alilama_core.interfaces",
    "registry": "alilama_core.registry",
}

__all__ = [
    "AlilamaError",
    "AttentionBackend",
    "CheckpointError",
    "Config",
    "ConfigError",
    "GPT",
    "KVCache",
    "ModelConfig",
    "PluginUnavailableError",
    "PositionalScheme",
    "Tokenizer",
    "TokenizerError",
    "Trainer",
    "UnknownPluginError",
    "apply_overrides",
    "build_model",
    "hookimpl",
    "preset",
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return module if name == "registry" else getattr(module, name)
    raise AttributeError(f"module 'alilama_core' has no attribute {name!r}")
