"""Moved to ``alilama_core.contracts.errors``, ``alilama_core.runs.outputs``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.errors import OutputError  # noqa: F401
from alilama_core.runs.outputs import *  # noqa: F403

warnings.warn(
    "alilama_core.outputs has moved to alilama_core.contracts.errors, alilama_core.runs.outputs; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
