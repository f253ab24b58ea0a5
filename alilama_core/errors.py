"""Moved to ``alilama_core.contracts.errors``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.errors import *  # noqa: F403

warnings.warn(
    "alilama_core.errors has moved to alilama_core.contracts.errors; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
