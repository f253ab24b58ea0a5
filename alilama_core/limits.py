"""Moved to ``alilama_core.contracts.limits``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.limits import *  # noqa: F403

warnings.warn(
    "alilama_core.limits has moved to alilama_core.contracts.limits; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
