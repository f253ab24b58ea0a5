"""Fixtures for the tokenizer tests: every test runs against both implementations.

``bpe`` is a ``BPETokenizer`` subclass pinned to the native module or to the
pure-Python reference; ``impl`` names which. The native case is skipped (with
the reason) when the module is not built or ``ALILAMA_BPE_PUREPYTHON=1``.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import regex
from alilama_bpe import _backend
from alilama_bpe.tokenizer import BPETokenizer

GPT4 = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)


# A minimal minbpe RegexTokenizer equivalent, written for these tests: one full pass
# over all chunk ids per merge, ties broken by ``max`` on an insertion-ordered dict.
def minbpe_merges(text: str, vocab_size: int) -> list[tuple[int, int]]:
    chunks = [list(c.encode("utf-8")) for c in regex.findall(GPT4, text)]
    merges = []
    for idx in range(256, vocab_size):
        counts: dict[tuple[int, int], int] = {}
        for ids in chunks:
            for p in zip(ids, ids[1:]):
                counts[p] = counts.get(p, 0) + 1
        if not counts:
            break
        best = max(counts, key=counts.get)
        new_chunks = []
        for ids in chunks:
            out, i = [], 0
            while i < len(ids):
                if i < len(ids) - 1 and (ids[i], ids[i + 1]) == best:
                    out.append(idx)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            new_chunks.append(out)
        chunks = new_chunks
        merges.append(best)
    return merges


def minbpe_encode(text: str, merges: list[tuple[int, int]]) -> list[int]:
    rank = {p: 256 + i for i, p in enumerate(merges)}
    out = []
    for c in regex.findall(GPT4, text):
        ids = list(c.encode("utf-8"))
        while len(ids) >= 2:
            pairs = set(zip(ids, ids[1:]))
            best = min(pairs, key=lambda p: rank.get(p, float("inf")))
            if best not in rank:
                break
            new, i = [], 0
            while i < len(ids):
                if i < len(ids) - 1 and (ids[i], ids[i + 1]) == best:
                    new.append(rank[best])
                    i += 2
                else:
                    new.append(ids[i])
                    i += 1
            ids = new
        out.extend(ids)
    return out


@pytest.fixture(scope="session")
def minbpe() -> SimpleNamespace:
    """``minbpe.merges(text, vocab_size)`` and ``minbpe.encode(text, merges)``."""
    return SimpleNamespace(merges=minbpe_merges, encode=minbpe_encode, pattern=GPT4)


REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("ALILAMA_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(params=["native", "python"])
def impl(request) -> str:
    if request.param == "native" and _backend.native is None:
        pytest.skip(f"native BPE backend: {_backend.IMPORT_ERROR}")
    return request.param


@pytest.fixture
def bpe(impl: str) -> type[BPETokenizer]:
    return type(f"BPETokenizer_{impl}", (BPETokenizer,), {"backend": impl})


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA / "tinystories" / "train.txt").is_file():
        pytest.skip(f"shared data not found at {DATA} (set ALILAMA_DATA to the data folder)")
    return DATA


@pytest.fixture(scope="session")
def stories(data_dir: Path) -> str:
    """The first ~400 kB of TinyStories train (whole stories, separators included)."""
    text = (data_dir / "tinystories" / "train.txt").read_text(encoding="utf-8")
    cut = text.find("<|endoftext|>", 400_000)
    return text[: cut + len("<|endoftext|>\n")]


@pytest.fixture(scope="session")
def book(data_dir: Path) -> str:
    """About 200 kB of a Gutenberg book (quotes, punctuation, CRLF-free prose)."""
    return (data_dir / "gutenberg" / "pg1342_Pride-and-Prejudice.txt").read_text(encoding="utf-8")[:200_000]


@pytest.fixture(scope="session")
def tricky() -> list[str]:
    """Strings that exercise every branch of the split pattern."""
    return list(TRICKY)


TRICKY = [
    "",
    "a",
    "aaaaaaaaaaaaaaaaaaaaa",
    "hello world!!!? (안녕하세요!) lol123 😉",
    "I'm He'LL we'VE they'Re it'S isn'T I'D 'ſ 'Ll",
    "   leading and trailing   \n\n\r\n  \t\t x  \u00a0\u3000y\n",
    "12345678 1.5e10 ٣٤٥ ⅫⅢ 0x1F",
    "naïve café, Straße, ΑΒΓ αβγ, Привет мир, عربى, עברית, 中文字符, 日本語のテキスト",
    "e\u0301 n\u0303 combining\u0300\u0301 marks",
    "emoji: 👩‍👩‍👧‍👦 🇫🇷 👍🏽 and symbols ∑∫√ ™©®",
    "tabs\tand\x0bvertical\x0cfeeds\x1c\x1d\x1e\x1f\x85 end",
    "<|endoftext|> is just text here",
]
