"""Moved to ``alilama_core.contracts.task``, ``alilama_core.kit.task``, ``alilama_core.runs.tasks``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.task import *  # noqa: F403
from alilama_core.kit.task import check_task  # noqa: F401
from alilama_core.runs.tasks import *  # noqa: F403

warnings.warn(
    "alilama_core.tasks has moved to alilama_core.contracts.task, alilama_core.kit.task, alilama_core.runs.tasks; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
