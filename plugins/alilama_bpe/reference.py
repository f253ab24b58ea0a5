"""Pure-Python byte-level BPE: the reference that defines the semantics.

The native module (``alilama_bpe._native``) must agree with this file token
for token. It is written for reading, in minbpe's style, and doubles as the
fallback when the native module is missing or ``ALILAMA_BPE_PUREPYTHON=1``.

The rules, with tiny examples:

* ids 0..255 are raw bytes; id ``256 + i`` is the i-th merge.
* text is split into chunks by ``pattern`` (GPT-4's by default) and merges
  never cross chunks::

      >>> split("Hello world's 12345")
      ['Hello', ' world', "'s", ' ', '123', '45']

* pair counts count overlapping occurrences and a merge replaces left to
  right::

      >>> merge([97, 97, 97], (97, 97), 256)
      [256, 97]

* ties between equally frequent pairs go to the pair that occurs first in the
  current text (what ``max(stats, key=stats.get)`` does on an insertion-ordered
  dict).
"""

from __future__ import annotations

import codecs
import heapq
import threading
from collections.abc import Callable, Iterable, Sequence

import regex

from alilama_core.contracts.splits import GPT4 as GPT4_SPLIT_PATTERN


MAX_TOKEN_BYTES = 4096
"""Longest token a vocabulary may hold: longer merges are never learned, and refused on loading."""
MAX_VOCAB_BYTES = 256 << 20
"""Most bytes all tokens of a vocabulary may hold together (training stops there)."""

_compiled: dict[str, regex.Pattern] = {}


def _compile(pattern: str) -> regex.Pattern:
    if pattern not in _compiled:
        _compiled[pattern] = regex.compile(pattern)
    return _compiled[pattern]


def split(text: str, pattern: str = GPT4_SPLIT_PATTERN) -> list[str]:
    """Chunks of ``text`` under ``pattern`` (an empty pattern: the whole text, one chunk)."""
    if not pattern:
        return [text] if text else []
    return _compile(pattern).findall(text)


_ILL_FORMED = "\udfff"  # stands for one ill-formed subpart: a lone surrogate, of no class
_spans = threading.local()


def _mark_ill_formed(e: UnicodeDecodeError) -> tuple[str, int]:
    _spans.found.append((e.start, e.end))
    return _ILL_FORMED, e.end


codecs.register_error("alilama-bpe-mark", _mark_ill_formed)


def split_bytes(data: bytes, pattern: str = GPT4_SPLIT_PATTERN) -> list[bytes]:
    r"""Chunks of raw bytes: each maximal ill-formed UTF-8 subpart is one character of no class.

    >>> split_bytes(b"ab \xe0\xa0cd \xff!")
    [b'ab', b' \xe0\xa0', b'cd', b' \xff!']
    """
    _spans.found = []
    text = data.decode("utf-8", errors="alilama-bpe-mark")
    spans = iter(_spans.found)
    out = []
    for chunk in split(text, pattern):
        parts = chunk.split(_ILL_FORMED)
        pieces = [parts[0].encode("utf-8")]
        for part in parts[1:]:
            a, b = next(spans)
            pieces += [data[a:b], part.encode("utf-8")]
        out.append(b"".join(pieces))
    return out


def split_specials(text: str, specials: Sequence[str]) -> list[str]:
    """``text`` cut at every special token, the tokens themselves dropped.

    >>> split_specials("a<|endoftext|>b", ["<|endoftext|>"])
    ['a', 'b']
    """
    if not specials:
        return [text]
    alternation = "|".join(regex.escape(s) for s in specials)
    return regex.split(alternation, text)


def get_stats(chunks: Iterable[list[int]], weights: Iterable[int]) -> dict[tuple[int, int], int]:
    """Weighted counts of adjacent pairs, in order of first occurrence.

    >>> get_stats([[1, 2, 3, 1, 2]], [1])
    {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    """
    stats: dict[tuple[int, int], int] = {}
    for ids, w in zip(chunks, weights):
        for pair in zip(ids, ids[1:]):
            stats[pair] = stats.get(pair, 0) + w
    return stats


def merge(ids: list[int], pair: tuple[int, int], idx: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``idx``, left to right.

    >>> merge([1, 2, 3, 1, 2], (1, 2), 4)
    [4, 3, 4]
    """
    out: list[int] = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(idx)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def count_chunks(
    texts: Iterable[str], pattern: str = GPT4_SPLIT_PATTERN, specials: Sequence[str] = ()
) -> dict[bytes, int]:
    """Unique chunks (as UTF-8) with their counts, in order of first occurrence.

    Special tokens are document boundaries: never counted, never crossed.
    """
    counts: dict[bytes, int] = {}
    for text in texts:
        for doc in split_specials(text, specials):
            for chunk in split(doc, pattern):
                b = chunk.encode("utf-8")
                counts[b] = counts.get(b, 0) + 1
    return counts


def train(
    chunk_counts: dict[bytes, int],
    num_merges: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[tuple[int, int]]:
    """Learn up to ``num_merges`` merges from unique chunks and their counts.

    Stops early (returning fewer merges) when no pair is left. A pair whose token
    would be longer than ``MAX_TOKEN_BYTES`` is never merged.
    """
    chunks = [list(b) for b in chunk_counts]
    weights = list(chunk_counts.values())
    merges: list[tuple[int, int]] = []
    length = [1] * 256
    total = 256
    for i in range(num_merges):
        stats = get_stats(chunks, weights)
        stats = {p: c for p, c in stats.items() if length[p[0]] + length[p[1]] <= MAX_TOKEN_BYTES}
        if not stats:
            break
        pair = max(stats, key=stats.__getitem__)  # first maximal pair = earliest in the text
        total += length[pair[0]] + length[pair[1]]
        if total > MAX_VOCAB_BYTES:
            break
        length.append(length[pair[0]] + length[pair[1]])
        idx = 256 + i
        chunks = [merge(ids, pair, idx) if len(ids) > 1 else ids for ids in chunks]
        merges.append(pair)
        if progress is not None:
            progress(i + 1, num_merges)
    return merges


def train_incremental(
    chunk_counts: dict[bytes, int],
    num_merges: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[tuple[int, int]]:
    """Same merges as :func:`train`, with work proportional to what each merge changes.

    Symbols of all unique chunks live in one array of doubly linked lists, laid
    out in order of first occurrence, so a node's index orders occurrences as the
    text does. Each pair keeps its exact count, the set of its occurrences (node
    index of the left symbol) and a lower bound of its first occurrence; a heap
    of ``(-count, first, pair)`` with lazy deletion finds the next merge. The
    bound is made exact only when the pair reaches the top of the heap, so a
    merge costs time in proportion to the occurrences it changes, even in one
    long run of a character (removing an occurrence never searches the others).
    """
    ids: list[int] = []
    nxt: list[int] = []
    prv: list[int] = []
    weight: list[int] = []
    for b, w in chunk_counts.items():
        if len(b) < 2:
            continue
        base = len(ids)
        for k, byte in enumerate(b):
            ids.append(byte)
            prv.append(base + k - 1 if k else -1)
            nxt.append(base + k + 1 if k + 1 < len(b) else -1)
            weight.append(w)

    count: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    first: dict[tuple[int, int], int] = {}  # a lower bound of the first occurrence
    changed: set[tuple[int, int]] = set()
    length = [1] * 256
    too_long: set[tuple[int, int]] = set()
    total = 256

    def add(pair: tuple[int, int], pos: int, w: int) -> None:
        count[pair] = count.get(pair, 0) + w
        where.setdefault(pair, set()).add(pos)
        if pos < first.get(pair, len(ids)):
            first[pair] = pos
        changed.add(pair)

    def remove(pair: tuple[int, int], pos: int, w: int) -> None:
        count[pair] -= w
        where[pair].discard(pos)
        changed.add(pair)

    for i in range(len(ids)):
        if nxt[i] != -1:
            add((ids[i], ids[i + 1]), i, weight[i])
    heap = [(-count[p], first[p], p) for p in changed]
    heapq.heapify(heap)
    changed.clear()

    merges: list[tuple[int, int]] = []
    while len(merges) < num_merges and heap:
        neg, f, pair = heapq.heappop(heap)
        if count.get(pair, 0) != -neg or neg == 0 or first[pair] != f or pair in too_long:
            continue  # stale entry
        if f not in where[pair]:  # the bound is stale: make it exact, then try again
            first[pair] = min(where[pair])
            heapq.heappush(heap, (neg, first[pair], pair))
            continue
        a, b = pair
        if length[a] + length[b] > MAX_TOKEN_BYTES:
            too_long.add(pair)
            continue
        total += length[a] + length[b]
        if total > MAX_VOCAB_BYTES:
            break
        length.append(length[a] + length[b])
        z = 256 + len(merges)
        for i in sorted(where[pair]):
            j = nxt[i]
            if ids[i] != a or j == -1 or ids[j] != b:
                continue  # destroyed by an overlapping merge just before
            w, p, n = weight[i], prv[i], nxt[j]
            remove(pair, i, w)
            if p != -1:
                remove((ids[p], a), p, w)
            if n != -1:
                remove((b, ids[n]), j, w)
            ids[i], ids[j] = z, -1
            nxt[i] = n
            if n != -1:
                prv[n] = i
            if p != -1:
                add((ids[p], z), p, w)
            if n != -1:
                add((z, ids[n]), i, w)
        merges.append(pair)
        del count[pair], where[pair], first[pair]
        changed.discard(pair)
        for q in changed:
            if count[q] > 0 and q not in too_long:
                heapq.heappush(heap, (-count[q], first[q], q))
        changed.clear()
        if progress is not None:
            progress(len(merges), num_merges)
    return merges


def encode_chunk(data: bytes, ranks: dict[tuple[int, int], int]) -> list[int]:
    """Apply merges to one chunk: always the lowest-ranked pair present first."""
    ids = list(data)
    while len(ids) >= 2:
        stats = get_stats([ids], [1])
        pair = min(stats, key=lambda p: ranks.get(p, float("inf")))
        if pair not in ranks:
            break
        ids = merge(ids, pair, 256 + ranks[pair])
    return ids


def check_merges(merges: Sequence[tuple[int, int]]) -> None:
    """Refuse merges that build a token over ``MAX_TOKEN_BYTES`` (or too big a vocabulary).

    Only lengths are computed, so refusing costs no memory.
    """
    from alilama_core.base.errors import TokenizerError

    length = [1] * 256
    total = 256
    for i, (a, b) in enumerate(merges):
        n = length[a] + length[b]
        if n > MAX_TOKEN_BYTES:
            raise TokenizerError(
                f"merge {i} ({a}, {b}) makes a token of {n} bytes; tokens are limited to {MAX_TOKEN_BYTES} bytes"
            )
        total += n
        if total > MAX_VOCAB_BYTES:
            raise TokenizerError(f"the merges make a vocabulary of more than {MAX_VOCAB_BYTES} bytes")
        length.append(n)


class Encoder:
    """Ordinary-text encoder with a cache of seen chunks."""

    def __init__(
        self, merges: Sequence[tuple[int, int]], pattern: str = GPT4_SPLIT_PATTERN, ids: Sequence[int] | None = None
    ):
        self.ranks = {tuple(p): i for i, p in enumerate(merges)}
        self.pattern = pattern
        self.cache: dict[str, list[int]] = {}
        self.ids = ids  # the vocabulary's id of each byte and merge, when not Alilama's own

    def _chunk(self, data: bytes) -> list[int]:
        ids = encode_chunk(data, self.ranks)
        return ids if self.ids is None else [self.ids[i] for i in ids]

    def encode_ordinary(self, text: str) -> list[int]:
        out: list[int] = []
        cache = self.cache
        for chunk in split(text, self.pattern):
            ids = cache.get(chunk)
            if ids is None:
                ids = self._chunk(chunk.encode("utf-8"))
                if len(cache) < 100_000:
                    cache[chunk] = ids
            out.extend(ids)
        return out

    def encode_bytes(self, data: bytes) -> list[int]:
        """Ids of raw bytes (see :func:`split_bytes` for ill-formed UTF-8)."""
        out: list[int] = []
        for chunk in split_bytes(data, self.pattern):
            out.extend(self._chunk(chunk))
        return out


def vocab_bytes(merges: Sequence[tuple[int, int]]) -> list[bytes]:
    """Bytes of every non-special id: ``vocab[256 + i] = vocab[a] + vocab[b]``."""
    vocab = [bytes([i]) for i in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    return vocab


def split_specials_keep(text: str, specials: Sequence[str]) -> list[str]:
    """Like :func:`split_specials` but keeping the tokens at odd indices.

    >>> split_specials_keep("a<|endoftext|>b", ["<|endoftext|>"])
    ['a', '<|endoftext|>', 'b']
    """
    alternation = "|".join(regex.escape(s) for s in sorted(specials, key=len, reverse=True))
    return regex.split(f"({alternation})", text)
