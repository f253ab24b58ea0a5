"""``BPETokenizer``: byte-level BPE with GPT-4 pre-tokenization.

Worked example::

    >>> from alilama_bpe.tokenizer import BPETokenizer
    >>> tok = BPETokenizer.train(["aaabdaaabac"] * 3, vocab_size=259)
    >>> tok.merges
    [(97, 97), (256, 97), (257, 98)]
    >>> tok.encode("aaab")
    [258]
    >>> tok.decode([258, 97])
    'aaaba'

Vocabulary: ids 0..255 are bytes, ``256 + i`` is the i-th merge, and special
tokens take the ids right after the merges. ``vocab_size`` in :meth:`train`
counts all three, so ``merges = vocab_size - 256 - len(special_tokens)``.

An imported ``tokenizer.json`` may also bring a ``normalizer`` (NFC, applied to
the text before it is split) and added tokens that are not special (GPT-NeoX's
runs of spaces), found in the text before splitting as HF tokenizers finds them
(:class:`AddedToken`).
"""

from __future__ import annotations

import os
import re
import unicodedata
import warnings
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import regex

from alilama_bpe import _backend, patterns, reference
from alilama_bpe.reference import GPT4_SPLIT_PATTERN
from alilama_bpe.vocabulary import NORMALIZERS, AddedToken
from alilama_core.base.errors import AlilamaWarning, TokenizerError
from alilama_core.contracts.tokenizer import MAX_VOCAB_SIZE, AllowedSpecial, ProgressCallback, Tokenizer

if TYPE_CHECKING:
    import numpy as np

DisallowedSpecial = Literal["all"] | Collection[str]
"""tiktoken's ``disallowed_special``: ``"all"`` or the strings whose presence is an error."""

# Texts are handed to the native counter in batches of at most this many characters or texts
# (the counter holds a view of each text of a batch while it runs).
_BATCH_BYTES = 8 << 20  # the UTF-8 copies of a batch's non-ASCII texts are transient
_BATCH_TEXTS = 8192


def _default_threads(threads: int | None) -> int:
    if threads is not None and threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0)) or 1  # the cores this process may use
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_special_tokens(tokens: Iterable[str]) -> list[str]:
    """Validated list of special tokens: non-empty, no whitespace, none inside another."""
    out: list[str] = []
    for t in tokens:
        if not isinstance(t, str) or not t:
            raise TokenizerError(f"special tokens must be non-empty strings, got {t!r}")
        if any(c.isspace() for c in t):
            raise TokenizerError(f"special token {t!r} contains whitespace, which the .model format cannot hold")
        if t in out:
            raise TokenizerError(f"special token {t!r} is given twice")
        out.append(t)
    for a in out:
        for b in out:
            if a != b and a in b:
                raise TokenizerError(
                    f"special tokens collide: {a!r} is part of {b!r}, so text holding {b!r} would be ambiguous"
                )
    return out


_WORD = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")
"""A word character where ``single_word`` looks (the Unicode ``\\w`` of HF tokenizers' regex crate)."""
_SPACE = regex.compile(r"\p{White_Space}")
"""Whitespace that ``lstrip``/``rstrip`` take in (Unicode White_Space: not U+001C..U+001F, unlike str.isspace)."""


class _Pass:
    """One pass of HF tokenizers' added-token search: leftmost-longest matches, then each token's flags."""

    def __init__(self, tokens: list[AddedToken], normalizer: str | None):
        self.by_text: dict[str, AddedToken] = {}
        for t in tokens:  # a normalized token is looked for as its normalized text
            self.by_text.setdefault(unicodedata.normalize(normalizer, t.content) if normalizer else t.content, t)
        self.ids = {text: t.id for text, t in self.by_text.items()}
        self.plain = all(t.plain for t in self.by_text.values())
        longest_first = sorted(self.by_text, key=len, reverse=True)  # at one position the longest wins
        found = re.compile(f"({'|'.join(map(re.escape, longest_first))})") if self.by_text else None
        self.find = found.finditer if found else None
        self.cut = found.split if found else None

    def split(self, text: str, out: list) -> None:
        """Append ``text`` to ``out`` cut at the tokens: text, id, text, ..., id, text (an empty text where two
        tokens touch; an id None where HF tokenizers cuts the text without a token)."""
        if self.cut is None or not text:
            out.append(text)
        elif self.plain:  # found exactly where their text is: one regex split
            parts = self.cut(text)
            ids = self.ids
            parts[1::2] = [ids[p] for p in parts[1::2]]
            out += parts
        else:
            self._split_with_flags(text, out)

    def _split_with_flags(self, text: str, out: list) -> None:
        done = 0  # end of the last token taken
        for m in self.find(text):  # type: ignore[misc]
            start, stop = m.span()
            tok = self.by_text[m.group()]
            if tok.single_word and (
                (start > 0 and _WORD.match(text, start - 1)) or (stop < len(text) and _WORD.match(text, stop))
            ):
                continue  # not a whole word: skipped (the search goes on after it, as HF's does)
            if tok.lstrip:
                left = start
                while left > 0 and _SPACE.match(text, left - 1):
                    left -= 1
                start = max(left, done)
            if tok.rstrip:
                while stop < len(text) and _SPACE.match(text, stop):
                    stop += 1
            if start > stop:
                raise TokenizerError(
                    f"the added token {tok.content!r} at character {m.start()} lies in the whitespace the token "
                    f"before it takes in (rstrip); HF tokenizers fails on such text too"
                )
            out.append(text[done:start] if done < start else "")
            out.append(tok.id if start < stop else None)  # HF drops the empty match where the one before took it
            done = stop
        out.append(text[done:])


class _AddedSplitter:
    """Text as HF tokenizers cuts it before its pre-tokenizer: added tokens (and special tokens) taken out.

    Tokens with ``normalized`` false are found in the text as given; the
    pieces between them are normalized, one by one, and the normalized tokens
    are found in those.
    """

    def __init__(self, tokens: list[AddedToken], normalizer: str | None):
        self.normalizer = normalizer
        self.raw = _Pass([t for t in tokens if not t.normalized], None)
        self.normalized = _Pass([t for t in tokens if t.normalized], normalizer)
        self.tokens = [t.content for t in tokens]
        # One leftmost-longest pass over all the tokens (the native code's search for special tokens) finds
        # the same where no token has flags, none changes when normalized, and none found in the first pass
        # can share characters with one of the second: given text that normalizing leaves as it is.
        self.one_pass = all(
            t.plain and (not (t.normalized and normalizer) or unicodedata.normalize(normalizer, t.content) == t.content)
            for t in tokens
        ) and not any(_overlap(a, b) for a in self.raw.by_text for b in self.normalized.by_text)

    def unchanged(self, text: str) -> bool:
        """Whether normalizing leaves the pieces of ``text`` between the tokens of the first pass as they are."""
        if self.normalizer is None:
            return True
        pieces = self.raw.cut(text)[::2] if self.raw.cut else [text]
        return all(unicodedata.is_normalized(self.normalizer, p) for p in pieces)

    def split(self, text: str) -> list:
        """The pieces of ``text``: text, id, text, ..., id, text (ids None where a cut has no token)."""
        first: list = []
        self.raw.split(text, first)
        if self.normalizer is None and self.normalized.cut is None:
            return first
        out: list = []
        for k, piece in enumerate(first):
            if k % 2:
                out.append(piece)
            else:
                self.normalized.split(unicodedata.normalize(self.normalizer, piece) if self.normalizer else piece, out)
        return out


def _overlap(a: str, b: str) -> bool:
    """Whether a text can hold ``a`` and ``b`` sharing characters (one inside the other, or an end and a start)."""
    return a in b or b in a or any(a.endswith(b[:k]) or b.endswith(a[:k]) for k in range(1, min(len(a), len(b))))


class BPETokenizer(Tokenizer):
    """Byte-level BPE tokenizer (minbpe's RegexTokenizer semantics, native speed)."""

    name: ClassVar[str] = "bpe"
    defaults: ClassVar[dict[str, Any]] = {"pattern": GPT4_SPLIT_PATTERN, "backend": None}
    """Training settings: the split ``pattern`` (regex) and ``backend`` (native, python or None)."""
    hf_export: ClassVar[bool] = True
    backend: ClassVar[str | None] = None
    """``"native"``, ``"python"`` or None (native when built); subclasses may pin it."""

    def __init__(
        self,
        merges: Sequence[tuple[int, int]] = (),
        special_tokens: dict[str, int] | None = None,
        pattern: str = GPT4_SPLIT_PATTERN,
        *,
        backend: str | None = None,
        ids: Sequence[int] | None = None,
        normalizer: str | None = None,
        added_tokens: Sequence[AddedToken] = (),
    ):
        """``normalizer``: None or ``"NFC"`` (see ``NORMALIZERS``). ``added_tokens``: tokens that are not
        special (a ``tokenizer.json``'s), and the flags of special ones (:class:`AddedToken`)."""
        self._merges: list[tuple[int, int]] = []
        for i, pair in enumerate(merges):
            a, b = int(pair[0]), int(pair[1])
            if not (0 <= a < 256 + i and 0 <= b < 256 + i):
                raise TokenizerError(f"merge {i} ({a}, {b}) uses an id that is not defined before it")
            self._merges.append((a, b))
        if len(set(self._merges)) != len(self._merges):
            raise TokenizerError("the merges repeat a pair")
        reference.check_merges(self._merges)  # token lengths, before any vocabulary is built
        specials = dict(special_tokens or {})
        check_special_tokens(specials)
        n = 256 + len(self._merges)
        self._ids = _check_ids(ids, n)
        taken = set(self._ids) if self._ids is not None else None
        special_ids = list(specials.values())
        if len(set(special_ids)) != len(special_ids):
            raise TokenizerError(f"special tokens share an id: {specials}")
        for tok, i in specials.items():
            if not isinstance(i, int) or i < 0 or (i < n if taken is None else i in taken):
                raise TokenizerError(f"special token {tok!r} has id {i}, which is taken by a byte or a merge")
        self._special = specials
        self._vocab: list[bytes] | None = None
        self._decode: dict[int, bytes] | None = None
        if normalizer is not None and normalizer not in NORMALIZERS:
            raise TokenizerError(f"unknown normalizer {normalizer!r}; known: None, {', '.join(NORMALIZERS)}")
        self._normalizer = normalizer
        self._added = self._check_added(added_tokens, taken)
        self._plain = {t.content: t.id for t in self._added if not t.special}
        # The native code finds special tokens itself: a tokenizer without a normalizer or added tokens
        # (and whose special tokens HF tokenizers finds in one pass, exactly where their text occurs) is
        # encoded there as a whole; otherwise its text is cut here (_AddedSplitter) and the pieces encoded.
        flags = {t.content: t for t in self._added if t.special}
        self._whole = (
            normalizer is None
            and not self._plain
            and all(t.plain for t in flags.values())
            and not any(
                _overlap(a, b) and flags[a].normalized != flags[b].normalized for a in flags for b in flags if a < b
            )
        )
        self._splitters: dict[tuple[str, ...], _AddedSplitter] = {}
        self.pattern = pattern
        self.requested_vocab_size: int | None = None
        self.stopped_early = False
        chosen = backend if backend is not None else type(self).backend
        self._requested = chosen
        self._impl = _backend.resolve(chosen)
        split = patterns.native_split(pattern)
        if self._impl == "native" and split is None:
            if chosen == "native":
                raise TokenizerError(
                    f"the native backend does not know the split pattern {pattern!r}; it knows "
                    f"{', '.join(sorted(patterns.NAMES))} (the reference backend reads any pattern)"
                )
            self._impl = "python"
        if self._impl == "native":
            # Added tokens are given as special tokens too: only those passed as allowed are looked for.
            known = {**specials, **self._plain}
            self._enc: Any = _backend.native.Encoder(
                self._merges, sorted(known.items(), key=lambda kv: kv[1]), self._ids or [], split
            )
        else:
            self._enc = reference.Encoder(self._merges, pattern, self._ids)

    def _is_bpe_id(self, i: int, taken: set[int] | None) -> bool:
        return i < 256 + len(self._merges) if taken is None else i in taken

    def _check_added(self, added_tokens: Sequence[AddedToken], taken: set[int] | None) -> list[AddedToken]:
        """All added tokens, special ones with their flags (given or HF's defaults), by id."""
        given: dict[str, AddedToken] = {}
        for t in added_tokens:
            if not isinstance(t, AddedToken):
                raise TokenizerError(f"added_tokens must hold AddedToken, not {type(t).__name__}")
            if t.content in given:
                raise TokenizerError(f"the added token {t.content!r} is given twice")
            given[t.content] = t
        ids: dict[int, str] = {i: tok for tok, i in self._special.items()}
        for t in given.values():
            if t.special:
                if self._special.get(t.content) != t.id:
                    raise TokenizerError(
                        f"the added token {t.content!r} (id {t.id}) is marked special but is not a special token "
                        f"with that id; special tokens: {self._special}"
                    )
                continue
            if t.content in self._special:
                raise TokenizerError(f"the added token {t.content!r} is a special token too")
            if t.id in ids:
                raise TokenizerError(f"the added token {t.content!r} has id {t.id}, the id of {ids[t.id]!r}")
            ids[t.id] = t.content
            if self._is_bpe_id(t.id, taken):  # allowed where the vocabulary's token has the same bytes
                internal = t.id if self._ids is None else self._ids.index(t.id)
                if self._vocab_list()[internal] != t.content.encode("utf-8"):
                    raise TokenizerError(
                        f"the added token {t.content!r} has id {t.id}, which is taken by a byte or a merge "
                        f"({self._vocab_list()[internal]!r})"
                    )
        out = [given.get(tok) or AddedToken(tok, i, special=True) for tok, i in self._special.items()]
        out += [t for t in given.values() if not t.special]
        return sorted(out, key=lambda t: t.id)

    # ------------------------------------------------------------------ info

    @property
    def implementation(self) -> str:
        """``"native"`` or ``"python"``: which code does the work."""
        return self._impl

    def fallback_notice(self) -> str | None:
        """Why the pure-Python reference does the work, when the native code could not (None otherwise)."""
        if self._impl == "native" or (self._requested == "python" and _backend.native is not None):
            return None
        reason = (
            "the native module is not built" if _backend.native is None else "the native pre-tokenizer does not know it"
        )
        return f"this split pattern runs on the pure-Python reference ({reason}): same ids, much slower"

    @property
    def merges(self) -> list[tuple[int, int]]:
        return list(self._merges)

    @property
    def ids(self) -> list[int] | None:
        """The id of each byte and merge (``ids[256 + i]``: merge i) when not Alilama's own, else None.

        Alilama's tokenizers number bytes 0..255 and merge i ``256 + i``; an
        imported vocabulary keeps its own ids (tiktoken's ranks, tokenizer.json's
        vocabulary), so ``merges`` are written in Alilama's numbering and
        ``ids`` maps it to the vocabulary's.
        """
        return None if self._ids is None else list(self._ids)

    def _id(self, internal: int) -> int:
        return internal if self._ids is None else self._ids[internal]

    @property
    def vocab_size(self) -> int:
        top = 255 + len(self._merges) if self._ids is None else max(self._ids)
        return max([top + 1, *(i + 1 for i in self._special.values()), *(i + 1 for i in self._plain.values())])

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._special)

    @property
    def normalizer(self) -> str | None:
        """``"NFC"`` when the text is composed before it is split (an imported ``tokenizer.json``'s), else None."""
        return self._normalizer

    @property
    def added_tokens(self) -> list[AddedToken]:
        """Every added token, by id: the special tokens (with their flags) and those that are not special.

        Those that are not special are found in any text, before it is split
        (a ``tokenizer.json``'s, e.g. GPT-NeoX's runs of spaces); decoding gives
        their text. Alilama's own tokenizers have special tokens only.
        """
        return list(self._added)

    @property
    def vocab(self) -> dict[int, bytes]:
        """Bytes of every id (special and added tokens as their UTF-8 text)."""
        out = {self._id(i): b for i, b in enumerate(self._vocab_list())}
        out.update({i: t.encode("utf-8") for t, i in self._plain.items()})
        out.update({i: t.encode("utf-8") for t, i in self._special.items()})
        return out

    def _vocab_list(self) -> list[bytes]:
        if self._vocab is None:
            self._vocab = reference.vocab_bytes(self._merges)
        return self._vocab

    def __repr__(self) -> str:
        extra = f", normalizer={self._normalizer!r}" if self._normalizer else ""
        extra += f", added_tokens={len(self._plain)}" if self._plain else ""
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self._merges)}, "
            f"special_tokens={self._special}{extra}, implementation={self._impl!r})"
        )

    # ------------------------------------------------------------------ training

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        special_tokens: Sequence[str] = (),
        threads: int | None = None,
        progress: ProgressCallback | None = None,
        pattern: str = GPT4_SPLIT_PATTERN,
        backend: str | None = None,
    ) -> "BPETokenizer":
        """Learn merges from ``texts``; ``vocab_size`` counts bytes, merges and special tokens.

        Special tokens are document separators: text is cut at them and they are
        never learned from. When the text allows fewer merges, training stops
        early with a warning and ``stopped_early`` set. ``progress(done, total)``
        follows the merges.
        """
        if isinstance(texts, str):
            texts = [texts]
        return cls._train(vocab_size, special_tokens, threads, progress, pattern, backend, texts=texts)

    @classmethod
    def train_files(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        vocab_size: int,
        *,
        errors: str = "strict",
        read_progress: ProgressCallback | None = None,
        special_tokens: Sequence[str] = (),
        threads: int | None = None,
        progress: ProgressCallback | None = None,
        pattern: str = GPT4_SPLIT_PATTERN,
        backend: str | None = None,
    ) -> "BPETokenizer":
        """:meth:`train` on UTF-8 files, streamed in blocks by the native code.

        A file that is not UTF-8 raises ``TokenizerError`` naming it and the byte
        offset, unless ``errors="replace"`` (U+FFFD). ``read_progress(bytes_read,
        total_bytes)`` follows the reading and counting.
        """
        if errors not in ("strict", "replace"):
            raise TokenizerError(f"errors must be 'strict' or 'replace', not {errors!r}")
        paths = [os.fspath(p) for p in paths]
        for p in paths:
            if not os.path.isfile(p):
                raise TokenizerError(f"no such file: {p}")
        return cls._train(
            vocab_size,
            special_tokens,
            threads,
            progress,
            pattern,
            backend,
            paths=paths,
            errors=errors,
            read_progress=read_progress,
        )

    @classmethod
    def _train(
        cls,
        vocab_size: int,
        special_tokens: Sequence[str],
        threads: int | None,
        progress: ProgressCallback | None,
        pattern: str,
        backend: str | None,
        *,
        texts: Iterable[str] | None = None,
        paths: Sequence[str] | None = None,
        errors: str = "strict",
        read_progress: ProgressCallback | None = None,
    ) -> "BPETokenizer":
        specials = check_special_tokens(special_tokens)
        if not isinstance(vocab_size, int) or vocab_size < 256 + len(specials):
            raise TokenizerError(
                f"vocab_size must be at least 256 (the bytes) + {len(specials)} (special tokens), got {vocab_size}"
            )
        if vocab_size > MAX_VOCAB_SIZE:
            raise TokenizerError(
                f"vocab_size must be at most {MAX_VOCAB_SIZE:,} (ids are kept below 2^24), got {vocab_size:,}"
            )
        num_merges = vocab_size - 256 - len(specials)
        impl = _backend.resolve(backend if backend is not None else cls.backend)
        if impl == "native" and pattern != GPT4_SPLIT_PATTERN:
            impl = "python"
        sizes = [os.path.getsize(p) for p in paths] if paths is not None else []
        if impl == "native":
            native = _backend.native
            trainer = native.Trainer(specials, _default_threads(threads))
            if paths is not None:
                before = 0
                for p, size in zip(paths, sizes):

                    def file_progress(done: int, total: int, before: int = before) -> None:
                        if read_progress is not None:
                            read_progress(before + done, sum(sizes))

                    try:
                        trainer.add_file(p, errors, file_progress)
                    except native.NativeTokenizerError as e:
                        raise TokenizerError(str(e)) from None
                    except MemoryError:
                        raise TokenizerError(f"not enough memory to train on {p}") from None
                    before += size
            else:
                batch: list[str] = []
                size = 0
                for t in texts or ():
                    if not isinstance(t, str):
                        raise TokenizerError(f"texts must be str, got {type(t).__name__}")
                    batch.append(t)
                    size += len(t)
                    if size >= _BATCH_BYTES or len(batch) >= _BATCH_TEXTS:
                        _add(trainer, batch)
                        batch, size = [], 0
                if batch:
                    _add(trainer, batch)
            if trainer.total_bytes == 0:
                raise TokenizerError("no text to train on (the input is empty)")
            with _native_errors("train on the text"):
                merges = [tuple(m) for m in trainer.train(num_merges, progress)]
        else:
            if paths is not None:

                def read_all() -> Iterable[str]:
                    done = 0
                    for p, size in zip(paths, sizes):
                        yield read_text(p, errors)
                        done += size
                        if read_progress is not None:
                            read_progress(done, sum(sizes))

                texts = read_all()
            counts = reference.count_chunks(_checked(texts or ()), pattern, specials)
            if not counts:
                raise TokenizerError("no text to train on (the input is empty)")
            merges = reference.train_incremental(counts, num_merges, progress)
        n = 256 + len(merges)
        tok = cls(merges, {t: n + k for k, t in enumerate(specials)}, pattern, backend=backend)
        tok.requested_vocab_size = vocab_size
        if len(merges) < num_merges:
            tok.stopped_early = True
            warnings.warn(
                f"the text allows only {len(merges)} merges, not {num_merges}: "
                f"the vocabulary has {tok.vocab_size} ids instead of {vocab_size}",
                AlilamaWarning,
                stacklevel=3,
            )
        return tok

    # ------------------------------------------------------------------ encoding

    def _special_sets(
        self, allowed_special: AllowedSpecial, disallowed_special: DisallowedSpecial | None = None
    ) -> tuple[list[str], list[str]]:
        """(special tokens to recognise, strings whose presence in the text is an error).

        tiktoken's meanings: ``allowed_special`` is ``"all"`` or a set (``"none"``
        and ``"none_raise"`` are the empty set); ``disallowed_special`` is ``"all"``
        (every special token not allowed) or a collection, ``()`` encoding the
        rest as plain text. Its default (None) is ``()`` for ``"none"``, else ``"all"``.
        """
        if allowed_special == "all":
            allowed = set(self._special)
        elif allowed_special in ("none", "none_raise"):
            allowed = set()
        elif not isinstance(allowed_special, str) and hasattr(allowed_special, "__iter__"):
            allowed = set(allowed_special)  # type: ignore[arg-type]
            unknown = allowed - set(self._special)
            if unknown:
                raise TokenizerError(f"unknown special tokens in allowed_special: {sorted(unknown)}")
        else:
            raise TokenizerError(
                f"allowed_special must be 'all', 'none', 'none_raise' or a set, not {allowed_special!r}"
            )
        if disallowed_special is None:
            disallowed_special = () if allowed_special == "none" else "all"
        if disallowed_special == "all":
            disallowed = [t for t in self._special if t not in allowed]
        elif not isinstance(disallowed_special, str) and hasattr(disallowed_special, "__iter__"):
            disallowed = list(dict.fromkeys(disallowed_special))
            for t in disallowed:
                if not isinstance(t, str) or not t:
                    raise TokenizerError(f"disallowed_special must hold non-empty strings, got {t!r}")
        else:
            raise TokenizerError(f"disallowed_special must be 'all' or a collection of str, not {disallowed_special!r}")
        return [t for t in self._special if t in allowed], disallowed

    @staticmethod
    def _disallowed_error(token: str) -> TokenizerError:
        return TokenizerError(
            f"the text contains the special token {token!r}; pass allowed_special='all' (or a set holding it) "
            f"to encode it as a special token, or allowed_special='none' (disallowed_special=()) to encode it "
            f"as plain text"
        )

    @staticmethod
    def _find_special(texts: Sequence[str], tokens: list[str]) -> tuple[int, str] | None:
        for i, text in enumerate(texts):
            for t in tokens:
                if isinstance(text, str) and t in text:
                    return i, t
        return None

    @staticmethod
    def _check_errors(errors: str) -> None:
        if errors not in ("strict", "replace"):
            raise TokenizerError(f"errors must be 'strict' or 'replace', not {errors!r}")

    def encode(
        self,
        text: str,
        allowed_special: AllowedSpecial = "none_raise",
        *,
        disallowed_special: DisallowedSpecial | None = None,
        errors: str = "strict",
    ) -> list[int]:
        """Ids of ``text``; special tokens as tiktoken's ``encode`` treats them.

        ``errors="replace"`` encodes a text holding lone surrogates as tiktoken
        does (surrogate pairs joined, lone ones as U+FFFD); ``"strict"`` raises.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode() takes str, not {type(text).__name__}")
        self._check_errors(errors)
        allowed, disallowed = self._special_sets(allowed_special, disallowed_special)
        if disallowed:
            found = self._find_special([text], disallowed)
            if found is not None:
                raise self._disallowed_error(found[1])
        try:
            return self._encode_one(text, allowed)
        except UnicodeEncodeError:
            if errors == "replace":
                return self._encode_one(_fix_surrogates(text), allowed)
            raise TokenizerError(
                f"the text is not valid Unicode (lone surrogate at character {_surrogate_at(text)}); "
                f"pass errors='replace' to encode it as U+FFFD"
            ) from None

    def _encode_one(self, text: str, allowed: list[str]) -> list[int]:
        if not self._whole:
            return self._encode_split([text], allowed, 1)[0]
        if self._impl == "native":
            with _native_errors("encode the text"):
                return self._enc.encode(text, allowed, 1)
        return self._encode_python(text, allowed)

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text`` with special tokens treated as plain text."""
        return self.encode(text, allowed_special="none")

    def encode_bytes(self, data: bytes) -> list[int]:
        """Ids of raw bytes, special tokens as plain text (tiktoken's ``_encode_bytes``).

        UTF-8 gives ``encode_ordinary(data.decode())``; in other bytes, each
        maximal ill-formed UTF-8 subpart (what ``errors="replace"`` would turn
        into one U+FFFD) is one character that is neither letter, number nor
        space for the split pattern, and keeps its bytes.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"encode_bytes() takes bytes, not {type(data).__name__}")
        data = bytes(data)
        if not self._whole:  # added tokens and normalizers read text
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TokenizerError(
                    f"the bytes are not UTF-8 (at offset {e.start}); a tokenizer with {self._text_only()} "
                    f"encodes text only"
                ) from None
            return self.encode_ordinary(text)
        if self._impl == "native":
            with _native_errors("encode the text"):
                return self._enc.encode_bytes(data)
        return self._enc.encode_bytes(data)

    def _text_only(self) -> str:
        what = [f"the normalizer {self._normalizer}"] if self._normalizer else []
        what += ["added tokens that are not special"] if self._plain else []
        return " and ".join(what) or "special tokens that strip whitespace or match whole words only"

    def _splitter(self, allowed: Sequence[str]) -> _AddedSplitter:
        key = tuple(allowed)
        splitter = self._splitters.get(key)
        if splitter is None:
            wanted = set(allowed)
            tokens = [t for t in self._added if not t.special or t.content in wanted]
            splitter = self._splitters[key] = _AddedSplitter(tokens, self._normalizer)
            if len(self._splitters) > 16:
                del self._splitters[next(iter(self._splitters))]
        return splitter

    def _encode_split(self, texts: Sequence[str], allowed: Sequence[str], threads: int) -> list[list[int]]:
        """Ids of ``texts`` cut as HF tokenizers cuts them (added and allowed special tokens taken out, the
        pieces between normalized); the pieces are encoded together, on ``threads`` threads."""
        splitter = self._splitter(allowed)
        out: list[list[int] | None] = [None] * len(texts)
        if self._impl == "native" and splitter.one_pass:  # the native code finds the tokens itself
            direct = [k for k, t in enumerate(texts) if splitter.unchanged(t)]
            with _native_errors("encode the text"):
                if len(texts) == 1 and direct:
                    out[0] = self._enc.encode(texts[0], splitter.tokens, threads)
                elif direct:
                    batch = [texts[k] for k in direct]
                    for k, ids in zip(direct, self._enc.encode_batch(batch, splitter.tokens, threads, [])):
                        out[k] = ids
        rest = [k for k, ids in enumerate(out) if ids is None]
        layouts = [splitter.split(texts[k]) for k in rest]
        pieces = [p for layout in layouts for p in layout[::2]]
        if self._impl == "native":
            encoded = self._encode_native_pieces(pieces, threads)
        else:
            encoded = [self._enc.encode_ordinary(p) if p else [] for p in pieces]
        at = 0
        for k, layout in zip(rest, layouts):
            n = (len(layout) + 1) // 2
            parts: list = [None] * len(layout)
            parts[::2] = encoded[at : at + n]
            parts[1::2] = [[i] if i is not None else [] for i in layout[1::2]]
            out[k] = list(chain.from_iterable(parts))
            at += n
        return out  # type: ignore[return-value]

    def _encode_native_pieces(self, pieces: list[str], threads: int) -> list[list[int]]:
        """Ids of each piece: in batches, a long piece alone (the native code cuts it for threads)."""
        encoded: list[list[int]] = []
        batch: list[str] = []
        size = 0
        for p in pieces:
            if threads > 1 and len(p) >= _BATCH_BYTES // 8:
                encoded += self._encode_native_batch(batch, threads)
                batch, size = [], 0
                with _native_errors("encode the text"):
                    encoded.append(self._enc.encode(p, [], threads))
                continue
            batch.append(p)
            size += len(p)
            if size >= _BATCH_BYTES or len(batch) >= _BATCH_TEXTS:
                encoded += self._encode_native_batch(batch, threads)
                batch, size = [], 0
        return encoded + self._encode_native_batch(batch, threads)

    def _encode_native_batch(self, batch: list[str], threads: int) -> list[list[int]]:
        if not batch:
            return []
        with _native_errors("encode the text"):
            return self._enc.encode_batch(batch, [], threads, [])

    def _encode_python(self, text: str, allowed: Sequence[str]) -> list[int]:
        if not allowed:
            return self._enc.encode_ordinary(text)
        out: list[int] = []
        pieces = reference.split_specials_keep(text, allowed)
        for k, piece in enumerate(pieces):
            if k % 2:
                out.append(self._special[piece])
            elif piece:
                out.extend(self._enc.encode_ordinary(piece))
        return out

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        threads: int | None = None,
        allowed_special: AllowedSpecial = "none_raise",
        disallowed_special: DisallowedSpecial | None = None,
        errors: str = "strict",
    ) -> list[list[int]]:
        """``[encode(t) for t in texts]`` with the same options, on ``threads`` threads."""
        texts = texts if isinstance(texts, list) else list(texts)
        self._check_errors(errors)
        allowed, disallowed = self._special_sets(allowed_special, disallowed_special)
        try:
            return self._encode_many(texts, allowed, disallowed, threads)
        except UnicodeEncodeError as e:
            if errors == "replace":
                return self._encode_many([_fix_surrogates(t) for t in texts], allowed, disallowed, threads)
            at = next(((i, _surrogate_at(t)) for i, t in enumerate(texts) if _surrogate_at(t) >= 0), (0, e.start))
            raise TokenizerError(
                f"text {at[0]} is not valid Unicode (lone surrogate at character {at[1]}); "
                f"pass errors='replace' to encode it as U+FFFD"
            ) from None

    def _encode_many(
        self, texts: list[str], allowed: list[str], disallowed: list[str], threads: int | None
    ) -> list[list[int]]:
        if self._impl == "native" and self._whole:  # checks for disallowed special tokens while encoding
            try:
                with _native_errors("encode the text"):
                    return self._enc.encode_batch(texts, allowed, _default_threads(threads), disallowed)
            except _backend.native.DisallowedSpecialError as e:
                raise self._disallowed_error(str(e)) from None
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"encode_batch() takes a list of str, not of {type(t).__name__}")
        if disallowed:
            found = self._find_special(texts, disallowed)
            if found is not None:
                raise self._disallowed_error(found[1])
        if not self._whole:
            return self._encode_split(texts, allowed, _default_threads(threads))
        return [self._encode_python(t, allowed) for t in texts]

    def encode_file(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        errors: str = "strict",
        progress: ProgressCallback | None = None,
    ) -> "np.ndarray":
        """Ids of a UTF-8 file as a numpy array (uint16 when every id fits, else uint32).

        The file is read in pieces and encoded on ``threads`` threads; every
        special token in it (e.g. the ``<|endoftext|>`` between documents) is
        encoded as its id. A non-UTF-8 file raises ``TokenizerError`` naming
        the byte offset, unless ``errors="replace"``. With a normalizer or
        added tokens the file is read whole, normalized and cut here, and the
        pieces encoded on ``threads`` threads.
        """
        import numpy as np

        from alilama_core.contracts.data import token_dtype

        path = os.fspath(path)
        if not os.path.isfile(path):
            raise TokenizerError(f"no such file: {path}")
        if errors not in ("strict", "replace"):
            raise TokenizerError(f"errors must be 'strict' or 'replace', not {errors!r}")
        if self._impl == "native" and self._whole:
            with _native_errors("encode the file"):
                return self._enc.encode_file(path, _default_threads(threads), errors, progress)
        text = read_text(path, errors)  # the native code streams files; normalizing and added tokens need text
        if self._whole:
            ids = self._encode_python(text, list(self._special))
        else:
            ids = self._encode_split([text], list(self._special), _default_threads(threads))[0]
        if progress is not None:
            progress(os.path.getsize(path), os.path.getsize(path))
        return np.asarray(ids, dtype=token_dtype(self.vocab_size))

    # ------------------------------------------------------------------ decoding

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        if self._impl == "native":
            try:
                return self._enc.decode_bytes(ids if hasattr(ids, "__array__") else list(ids))
            except ValueError as e:
                raise TokenizerError(str(e)) from None
        if self._decode is None:
            self._decode = self.vocab
        vocab = self._decode
        out = []
        for i in ids:
            b = vocab.get(int(i))
            if b is None:
                raise TokenizerError(f"token id {int(i)} is not in the vocabulary")
            out.append(b)
        return b"".join(out)

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # ------------------------------------------------------------------ files

    def save(self, directory: str | os.PathLike[str]) -> None:
        from alilama_bpe import formats

        formats.save(self, Path(directory))

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, backend: str | None = None) -> "BPETokenizer":
        """Load a folder written by :meth:`save`, or a minbpe ``.model`` file."""
        from alilama_bpe import formats

        merges, specials, pattern = formats.read_folder(Path(directory))
        normalizer, added = formats.read_added(Path(directory))
        ids = formats.read_ids(Path(directory))
        return cls(merges, specials, pattern, backend=backend, ids=ids, normalizer=normalizer, added_tokens=added)

    def describe(self) -> dict[str, Any]:
        """What ``alilama tokenizer info`` shows."""
        return {
            **super().describe(),
            "merges": len(self.merges),
            "pattern": self.pattern,
            "implementation": self.implementation,
            "own ids": self._ids is not None,
            "stopped_early": self.stopped_early,
            **({"normalizer": self._normalizer} if self._normalizer else {}),
            **({"added tokens": len(self._plain)} if self._plain else {}),
        }

    def to_hf_json(self) -> dict:
        """The Hugging Face ``tokenizers`` ``tokenizer.json`` content (byte-level BPE)."""
        from alilama_bpe import formats

        return formats.hf_tokenizer_json(self)

    def save_hf(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``tokenizer.json`` into ``directory``; returns its path."""
        from alilama_bpe import formats

        return formats.save_hf(self, Path(directory))

    def to_tiktoken(self, name: str = "alilama-bpe"):
        """A ``tiktoken.Encoding`` with the same merges and special tokens.

        Refused for a tokenizer with a normalizer or added tokens that are not
        special (tiktoken has neither), or special tokens that strip whitespace.
        """
        from alilama_bpe import formats

        return formats.tiktoken_encoding(self, name)


def _check_ids(ids: Sequence[int] | None, n: int) -> list[int] | None:
    """Validated ids of the ``n`` bytes and merges (None: Alilama's own, 0..n-1)."""
    if ids is None:
        return None
    out = [int(i) for i in ids]
    if len(out) != n:
        raise TokenizerError(f"ids must give one id for each of the {n} bytes and merges, got {len(out)}")
    if len(set(out)) != n:
        raise TokenizerError("ids repeat an id")
    if min(out) < 0 or max(out) >= MAX_VOCAB_SIZE:
        raise TokenizerError(f"ids must lie in 0..{MAX_VOCAB_SIZE - 1}")
    return None if out == list(range(n)) else out


@contextmanager
def _native_errors(what: str) -> Iterator[None]:
    """Native failures as ``TokenizerError`` (a disallowed special token passes through)."""
    native = _backend.native
    try:
        yield
    except native.DisallowedSpecialError:
        raise
    except native.NativeTokenizerError as e:
        raise TokenizerError(f"cannot {what}: {e}") from None
    except MemoryError:
        raise TokenizerError(f"not enough memory to {what}; try a smaller input or fewer threads") from None


def _surrogate_at(text: str) -> int:
    """Index of the first surrogate code point in ``text``, or -1."""
    m = _SURROGATE.search(text) if isinstance(text, str) else None
    return m.start() if m else -1


_SURROGATE = re.compile("[\ud800-\udfff]")


def _fix_surrogates(text: str) -> str:
    """tiktoken's repair of a str holding surrogates: pairs joined, lone ones as U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _add(trainer: Any, batch: list[str]) -> None:
    try:
        with _native_errors("train on the text"):
            trainer.add(batch)
    except UnicodeEncodeError as e:
        raise TokenizerError(f"a text is not valid Unicode (lone surrogate at character {e.start})") from None


def _checked(texts: Iterable[str]) -> Iterable[str]:
    for t in texts:
        if not isinstance(t, str):
            raise TokenizerError(f"texts must be str, got {type(t).__name__}")
        yield t


def read_text(path: str | os.PathLike[str], errors: str = "strict") -> str:
    """Contents of a UTF-8 file; bad bytes raise ``TokenizerError`` naming the offset."""
    if errors not in ("strict", "replace"):
        raise TokenizerError(f"errors must be 'strict' or 'replace', not {errors!r}")
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise TokenizerError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise TokenizerError(f"{path} is a directory, not a text file") from None
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        raise TokenizerError(
            f"{path}: invalid UTF-8 at byte offset {e.start} (use --errors replace / errors='replace' "
            f"to substitute U+FFFD)"
        ) from None
