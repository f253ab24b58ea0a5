"""Moved to ``alilama_core.contracts.data``, ``alilama_core.contracts.errors``, ``alilama_core.runs.data``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.data import *  # noqa: F403
from alilama_core.contracts.errors import DataError  # noqa: F401
from alilama_core.runs.data import *  # noqa: F403

warnings.warn(
    "alilama_core.data has moved to alilama_core.contracts.data, alilama_core.contracts.errors, alilama_core.runs.data; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
