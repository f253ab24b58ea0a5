"""Moved to ``alilama_core.contracts.hookspecs``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.hookspecs import *  # noqa: F403

warnings.warn(
    "alilama_core.hookspecs has moved to alilama_core.contracts.hookspecs; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
