"""Moved to ``alilama_core.contracts.errors``, ``alilama_core.contracts.files``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.errors import FolderBusyError  # noqa: F401
from alilama_core.contracts.files import *  # noqa: F403

warnings.warn(
    "alilama_core.files has moved to alilama_core.contracts.errors, alilama_core.contracts.files; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
