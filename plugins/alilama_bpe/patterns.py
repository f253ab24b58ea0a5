"""The split patterns of the published byte-level BPE vocabularies, and which the native code knows.

A vocabulary is encoded with its own pattern: the one its tiktoken definition or
its ``tokenizer.json`` names. The native pre-tokenizer implements a few of them
by hand (``native/pretokenize.hpp``), each checked against the ``regex`` module
(``tests/tokenizer/test_patterns.py``); a pattern it does not know runs on the
pure-Python reference, which reads any pattern with ``regex`` (slower, never a
different split).
"""

from __future__ import annotations

from alilama_core.contracts.splits import CL100K, CL100K_HF, GPT2, LLAMA3, O200K, R50K
from alilama_core.contracts.splits import GPT4 as GPT4_SPLIT_PATTERN

__all__ = ["CL100K", "CL100K_HF", "GPT2", "GPT4_SPLIT_PATTERN", "LLAMA3", "O200K", "R50K"]

NAMES = {"gpt4": GPT4_SPLIT_PATTERN, "cl100k": CL100K, "gpt2": GPT2, "r50k": R50K, "llama3": LLAMA3, "o200k": O200K}
"""Short names accepted where a pattern is asked for (``tokenizer import --pattern``)."""

NATIVE_SPLIT = {GPT4_SPLIT_PATTERN: 0, LLAMA3: 0, CL100K: 1, CL100K_HF: 1, GPT2: 2, R50K: 2, O200K: 3}
"""Pattern -> the native pre-tokenizer that splits text exactly as ``regex`` reads it (``Split`` in C++)."""


def native_split(pattern: str) -> int | None:
    """The native pre-tokenizer for ``pattern``, or None when only the reference reads it."""
    return NATIVE_SPLIT.get(pattern)


HF_SPELLING = {CL100K: CL100K_HF}
"""Patterns that tokenizer.json must spell otherwise to split alike under the tokenizers library."""


def resolve(pattern: str) -> str:
    """A pattern given by short name (``NAMES``) or as the regex itself."""
    return NAMES.get(pattern, pattern)
