"""The split patterns of the published byte-level BPE vocabularies: one copy, for tokenizers and exporters.

A byte-level BPE cuts text into chunks with a regular expression before it merges
bytes within each chunk, so a vocabulary's ids depend on its pattern as much as on
its merges. A tokenizer plugin reads these to know which split it implements; an
exporter reads them to name the same split in the target format (llama.cpp's
``tokenizer.ggml.pre``). Several are the same split spelled otherwise; which ones
is said beside each.
"""

from __future__ import annotations

GPT4 = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)
"""The GPT-4 split (minbpe's spelling): Alilama's default, written so into its tokenizer.json."""
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
"""tiktoken's ``o200k_base`` (GPT-4o), with case-aware letter classes; tokenizer.json writes it alike."""
