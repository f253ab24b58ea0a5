"""Typed errors. Each message says what was wrong and how to fix it."""


class AlilamaError(Exception):
    """Base class for every error Alilama raises on purpose."""


class ConfigError(AlilamaError, ValueError):
    """An invalid configuration value or combination."""


class UnknownPluginError(ConfigError, KeyError):
    """A name was looked up in a registry that has no such entry (a config naming it is invalid)."""

    def __init__(self, kind: str, name: str, available: list[str], failed: list[str] | None = None):
        self.kind, self.name, self.available = kind, name, sorted(available)
        self.failed = list(failed or [])
        names = ", ".join(self.available) or "(none registered)"
        broken = f" Plugins that failed to load (one may provide it): {'; '.join(self.failed)}." if self.failed else ""
        super().__init__(
            f"unknown {kind} {name!r}; available: {names}.{broken} "
            f"Run `alilama plugins --check` to see what is installed."
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class PluginUnavailableError(AlilamaError):
    """A registered plugin cannot run here (missing package or device)."""


class TokenizerError(AlilamaError, ValueError):
    """Bad tokenizer input: missing or corrupt files, bad text, bad parameters."""


class CheckpointError(AlilamaError):
    """A missing, partial or corrupt checkpoint."""


class DiskFullError(AlilamaError):
    """A write failed because the disk (or the user's quota) is full; the message says where and what to do."""


class UnsupportedError(AlilamaError):
    """A plugin lacks an optional capability that this operation needs (e.g. a Hugging Face export)."""


class AlilamaWarning(UserWarning):
    """A warning Alilama issues on purpose (the test suite turns these into errors unless expected)."""


class DataError(AlilamaError, ValueError):
    """Bad or missing training data."""


class OutputError(AlilamaError):
    """An output path that cannot or must not be written."""


class FolderBusyError(AlilamaError):
    """Another process is writing the same output folder."""


class IntegrityError(CheckpointError):
    """A file of a run differs from the hash recorded when it was written."""
