"""Moved to ``alilama_core.contracts.errors``, ``alilama_core.runs.checkpoint``, ``alilama_core.runs.tokenizers``; this path re-exports it for one release."""

import warnings

from alilama_core.contracts.errors import IntegrityError  # noqa: F401
from alilama_core.runs.checkpoint import *  # noqa: F403
from alilama_core.runs.tokenizers import load_tokenizer  # noqa: F401

warnings.warn(
    "alilama_core.checkpoint has moved to alilama_core.contracts.errors, alilama_core.runs.checkpoint, alilama_core.runs.tokenizers; import from there (this path goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
