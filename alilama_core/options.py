"""Moved to ``alilama_core.contracts.options``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.options import *  # noqa: F403

warnings.warn(
    "alilama_core.options has moved to alilama_core.contracts.options; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
