"""Moved to ``alilama_core.runs.evaluate``; this path re-exports it for one release."""

import warnings

from alilama_core.runs.evaluate import *  # noqa: F403

warnings.warn(
    "alilama_core.evaluate has moved to alilama_core.runs.evaluate; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
