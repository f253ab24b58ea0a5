"""The ``Tokenizer`` interface (no torch import here, so tokenizer tools stay light).

A tokenizer maps text to integer ids and back, trains from texts, and saves to
and loads from a directory. Worked example with the built-in byte-level BPE::

    >>> from alilama_core.registry import get_tokenizer
    >>> tok = get_tokenizer("bpe").train(["hello hello world"], vocab_size=259)
    >>> tok.merges                   # 256 = "he", 257 = "hel", 258 = "hell"
    [(104, 101), (256, 108), (257, 108)]
    >>> tok.encode("hello")          # "hell" + "o" (111)
    [258, 111]
    >>> tok.decode([258, 111])
    'hello'
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from os import PathLike
from typing import AbstractSet, ClassVar, Literal, Union

AllowedSpecial = Union[Literal["all", "none", "none_raise"], AbstractSet[str]]
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while a long operation runs."""


class Tokenizer(abc.ABC):
    """Text to token ids and back.

    Implementations register themselves with ``register_tokenizers``. ``name`` is
    the registry name, written into saved tokenizer folders so ``load_tokenizer``
    finds the right class again.
    """

    name: ClassVar[str] = ""

    @classmethod
    @abc.abstractmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        special_tokens: Sequence[str] = (),
        threads: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> "Tokenizer":
        """Learn a vocabulary of ``vocab_size`` ids in all (bytes, merges and ``special_tokens``) from ``texts``."""

    @abc.abstractmethod
    def encode(self, text: str, allowed_special: AllowedSpecial = "none_raise") -> list[int]:
        """Token ids of ``text``; special tokens follow tiktoken's ``allowed_special`` rules."""

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        threads: int | None = None,
        allowed_special: AllowedSpecial = "none_raise",
    ) -> list[list[int]]:
        """Encode many texts; implementations may spread them over ``threads``."""
        return [self.encode(t, allowed_special=allowed_special) for t in texts]

    @abc.abstractmethod
    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Text of ``ids``; invalid UTF-8 is handled per ``errors`` (as ``bytes.decode``)."""

    @abc.abstractmethod
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Raw bytes of ``ids`` (streaming decoders need these to avoid broken characters)."""

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""

    @property
    @abc.abstractmethod
    def special_tokens(self) -> dict[str, int]:
        """Special token text to id, e.g. ``{"<|endoftext|>": 4096}``."""

    @property
    def eot_id(self) -> int | None:
        """Id of ``<|endoftext|>`` when the tokenizer has it."""
        return self.special_tokens.get("<|endoftext|>")

    @abc.abstractmethod
    def save(self, directory: str | PathLike[str]) -> None:
        """Write the tokenizer into ``directory`` (created if missing), atomically per file."""

    @classmethod
    @abc.abstractmethod
    def load(cls, directory: str | PathLike[str]) -> "Tokenizer":
        """Read a tokenizer written by ``save``; a missing or corrupt file raises ``TokenizerError``."""
