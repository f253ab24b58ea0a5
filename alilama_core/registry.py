"""Moved to ``alilama_core.engine.registry``; this path re-exports it for one release."""

import warnings

from alilama_core.engine.registry import *  # noqa: F403

warnings.warn(
    "alilama_core.registry has moved to alilama_core.engine.registry; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
