"""Typed errors. Each message says what was wrong and how to fix it."""


class AlilamaError(Exception):
    """Base class for every error Alilama raises on purpose."""


class ConfigError(AlilamaError, ValueError):
    """An invalid configuration value or combination."""


class UnknownPluginError(ConfigError, KeyError):
    """A name was looked up in a registry that has no such entry (a config naming it is invalid)."""

    def __init__(self, kind: str, name: str, available: list[str]):
        self.kind, self.name, self.available = kind, name, sorted(available)
        names = ", ".join(self.available) or "(none registered)"
        super().__init__(
            f"unknown {kind} {name!r}; available: {names}. "
            f"Run `alilama plugins` to see what is installed."
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class PluginUnavailableError(AlilamaError):
    """A registered plugin cannot run here (missing package or device)."""


class TokenizerError(AlilamaError, ValueError):
    """Bad tokenizer input: missing or corrupt files, bad text, bad parameters."""


class CheckpointError(AlilamaError):
    """A missing, partial or corrupt checkpoint."""
