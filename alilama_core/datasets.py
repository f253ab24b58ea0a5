"""Moved to ``alilama_core.runs.datasets``; this path re-exports it for one release."""

import warnings

from alilama_core.runs.datasets import *  # noqa: F403

warnings.warn(
    "alilama_core.datasets has moved to alilama_core.runs.datasets; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
