"""Moved to ``alilama_core.kit``; this path re-exports it for one release."""

import warnings

from alilama_core.kit import *  # noqa: F403

warnings.warn(
    "alilama_core.testing has moved to alilama_core.kit; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
