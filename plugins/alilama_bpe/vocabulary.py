"""What a byte-level BPE vocabulary holds beside its merges, shared by the tokenizer and its files.

``AddedToken`` (a ``tokenizer.json``'s added tokens, special or not, with their
flags), ``NORMALIZERS`` (what may be applied to the text before it is split),
and ``Vocabulary``: what the file formats (``formats``) read of a tokenizer,
which ``BPETokenizer`` is. The tokenizer, its files and the importers import
this module; it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from alilama_core.base.errors import TokenizerError
from alilama_core.contracts.tokenizer import MAX_VOCAB_SIZE

NORMALIZERS = ("NFC",)
"""Normalizers a tokenizer may apply to the text before splitting it (``unicodedata.normalize``'s forms)."""


@dataclass(frozen=True)
class AddedToken:
    """A token found in the text before it is split, as HF tokenizers finds ``tokenizer.json``'s added tokens.

    A special one is also in ``special_tokens`` (and found only when allowed, as
    any special token); one that is not special is always found. ``normalized``:
    looked for in the normalized text (after the tokens that are not, which are
    looked for in the text as given); HF's default is ``not special``.
    ``lstrip``/``rstrip``: the whitespace before/after it is part of the match;
    ``single_word``: found only where no word character touches it.
    """

    content: str
    id: int
    special: bool = False
    normalized: bool | None = None
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False

    def __post_init__(self) -> None:
        if self.normalized is None:
            object.__setattr__(self, "normalized", not self.special)
        if not isinstance(self.content, str) or not self.content:
            raise TokenizerError(f"added tokens must be non-empty strings, got {self.content!r}")
        if not isinstance(self.id, int) or isinstance(self.id, bool) or not 0 <= self.id < MAX_VOCAB_SIZE:
            raise TokenizerError(f"the added token {self.content!r} has id {self.id!r}, not in 0..{MAX_VOCAB_SIZE - 1}")
        for flag in ("special", "normalized", "lstrip", "rstrip", "single_word"):
            if not isinstance(getattr(self, flag), bool):
                raise TokenizerError(f"the added token {self.content!r}: {flag} must be true or false")

    @property
    def plain(self) -> bool:
        """Whether HF tokenizers finds it exactly where its text occurs (no stripping, no word check)."""
        return not (self.lstrip or self.rstrip or self.single_word)

    def as_dict(self) -> dict[str, Any]:
        """Its entry in a ``tokenizer.json``'s ``added_tokens`` (and in a saved folder's config)."""
        return {k: getattr(self, k) for k in _ADDED_KEYS}

    @classmethod
    def from_dict(cls, entry: Any, where: str) -> "AddedToken":
        if not isinstance(entry, dict) or not {"content", "id"} <= entry.keys():
            raise TokenizerError(f"{where}: an added token must be an object with 'content' and 'id', got {entry!r}")
        return cls(**{k: entry[k] for k in _ADDED_KEYS if k in entry})


_ADDED_KEYS = ("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special")


class Vocabulary(Protocol):
    """What the file formats write of a tokenizer (``alilama_bpe.tokenizer.BPETokenizer`` is one)."""

    name: str
    pattern: str

    @property
    def merges(self) -> list[tuple[int, int]]: ...

    @property
    def ids(self) -> list[int] | None:
        """The vocabulary's own id of each byte and merge (``None``: Alilama's, ``0..255 + len(merges)``)."""

    @property
    def special_tokens(self) -> dict[str, int]: ...

    @property
    def added_tokens(self) -> list[AddedToken]: ...

    @property
    def normalizer(self) -> str | None: ...

    @property
    def vocab_size(self) -> int: ...
