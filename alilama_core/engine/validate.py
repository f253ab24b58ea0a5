"""What is checked once, when a model is built: scheme x backend, plugin options, memory."""

from __future__ import annotations

import os

from alilama_core.contracts.attention import attention_backend
from alilama_core.contracts.config import Config, ModelConfig, estimate_parameters
from alilama_core.base.errors import ConfigError
from alilama_core.engine.registry import get_attention, get_positional, get_registry, get_trainer


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


def check_compatibility(positional: str, attention: str) -> None:
    """Raise ``ConfigError`` if the backend cannot take the scheme's positional information."""

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


def check_plugin_options(m: ModelConfig) -> None:
    """Let the positional scheme and the attention backend check their own settings."""

    get_positional(m.positional).check_options(m.positional_options, m.positional)
    attention_backend(get_attention(m.attention)).configured(m.attention_options)


def check_model(m: ModelConfig) -> ModelConfig:
    """Everything a model config must pass before it is built: values, the scheme × backend pair,
    each plugin's own options, and room in memory for its float32 weights. ``build_model`` calls it."""
    m.validate()
    check_memory(m, 4, "its float32 weights")
    check_compatibility(m.positional, m.attention)
    check_plugin_options(m)
    return m


def check_config(cfg: Config) -> Config:
    """A root config's values, its model's plugins (``check_model``) and the trainer's own settings,
    checked before any work starts (the CLI calls it once per command)."""
    cfg.validate()
    check_model(cfg.model)
    get_trainer(cfg.train.trainer).check_options(cfg.train.trainer_options, cfg.train.trainer)
    check_loggers(cfg.train)
    return cfg


def check_loggers(tcfg) -> dict:
    """Each of ``train.loggers`` is registered, its library installed and its options known, and
    ``train.logger_options`` names registered loggers only; the logger classes by name."""
    from alilama_core.contracts.logger import logger_class

    reg = get_registry()
    classes = {}
    for name in tcfg.loggers:
        cls = classes[name] = logger_class(reg.get("logger", name), name)
        cls.check_available()
        cls.check_options(tcfg.logger_options.get(name), name)
    for name in tcfg.logger_options:
        reg.entry("logger", name)  # an unknown name lists the registered ones
    return classes
