"""Moved to ``alilama_core.contracts.attention``, ``alilama_core.contracts.positional``, ``alilama_core.contracts.task``, ``alilama_core.contracts.tokenizer``, ``alilama_core.contracts.trainer``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.attention import *  # noqa: F403
from alilama_core.contracts.positional import *  # noqa: F403
from alilama_core.contracts.task import Task  # noqa: F401
from alilama_core.contracts.tokenizer import Tokenizer  # noqa: F401
from alilama_core.contracts.trainer import *  # noqa: F403

warnings.warn(
    "alilama_core.interfaces has moved to alilama_core.contracts.attention, alilama_core.contracts.positional, alilama_core.contracts.task, alilama_core.contracts.tokenizer, alilama_core.contracts.trainer; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
