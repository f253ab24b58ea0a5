"""Moved to ``alilama_core.contracts.tokenizer``, ``alilama_core.runs.tokenizers``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.tokenizer import *  # noqa: F403
from alilama_core.runs.tokenizers import *  # noqa: F403

warnings.warn(
    "alilama_core.tokenizer has moved to alilama_core.contracts.tokenizer, alilama_core.runs.tokenizers; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
