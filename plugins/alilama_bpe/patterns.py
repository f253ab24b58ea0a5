"""The split patterns of the published byte-level BPE vocabularies, and which the native code knows.

A vocabulary is encoded with its own pattern: the one its tiktoken definition or
its ``tokenizer.json`` names. The native pre-tokenizer implements a few of them
by hand (``native/pretokenize.hpp``), each checked against the ``regex`` module
(``tests/tokenizer/test_patterns.py``); a pattern it does not know runs on the
pure-Python reference, which reads any pattern with ``regex`` (slower, never a
different split).
"""

from __future__ import annotations

from alilama_bpe.reference import GPT4_SPLIT_PATTERN

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""GPT-2's split, as its release and the tokenizers library's ``ByteLevel(use_regex=True)`` write it."""
R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
"""GPT-2's split as tiktoken 0.14 writes it for ``gpt2``, ``r50k_base`` and ``p50k_base`` (splits alike)."""
CL100K = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s"""
)
"""tiktoken's ``cl100k_base``: the GPT-4 pattern with ``\\s++$`` (whitespace that ends the text is one chunk)."""
CL100K_HF = CL100K.replace(r"\p{N}{1,3}+", r"\p{N}{1,3}")
"""cl100k_base's split as tokenizer.json writes it: the tokenizers library's regex engine (Oniguruma)
reads ``{1,3}+`` as a repeated repeat, not a possessive one (``1745`` would be one chunk)."""
LLAMA3 = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""Llama-3's ``tokenizer.json`` split: the GPT-4 pattern written otherwise (splits alike)."""
O200K = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
"""tiktoken's ``o200k_base`` (GPT-4o), with case-aware letter classes."""

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
