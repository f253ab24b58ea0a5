"""Moved to ``alilama_core.engine.capture``; this path re-exports it for one release."""

import warnings

from alilama_core.engine.capture import *  # noqa: F403

warnings.warn(
    "alilama_core.capture has moved to alilama_core.engine.capture; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
