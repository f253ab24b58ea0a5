"""Moved to ``alilama_core.engine.model``; this path re-exports it for one release."""

import warnings

from alilama_core.engine.model import *  # noqa: F403

warnings.warn(
    "alilama_core.model has moved to alilama_core.engine.model; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
