"""Moved to ``alilama_core.engine.generation``; this path re-exports it for one release."""

import warnings

from alilama_core.engine.generation import *  # noqa: F403

warnings.warn(
    "alilama_core.generation has moved to alilama_core.engine.generation; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
