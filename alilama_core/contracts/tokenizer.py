"""The ``Tokenizer`` interface (no torch import here, so tokenizer tools stay light).

A tokenizer maps text to integer ids and back, trains from texts, and saves to
and loads from a directory. Worked example with the built-in byte-level BPE::

    >>> from alilama_core.engine.registry import get_tokenizer
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
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Any, ClassVar, Literal, Protocol, Union

from alilama_core.contracts.data import token_dtype
from alilama_core.base.errors import TokenizerError, UnsupportedError
from alilama_core.base.limits import DEFAULTS
from alilama_core.base.options import check_options

if TYPE_CHECKING:
    import numpy as np

AllowedSpecial = Union[Literal["all", "none", "none_raise"], AbstractSet[str]]
ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while a long operation runs."""

END_OF_TEXT = "<|endoftext|>"
"""The end-of-text special token: a document separator in text and data, the stop token of generation."""
KIND_FILE = "alilama_tokenizer.json"
"""Written by ``save_tokenizer`` into every saved tokenizer folder: ``{"kind": NAME}``."""
MAX_VOCAB_SIZE = DEFAULTS["MAX_VOCAB_SIZE"]
"""Largest vocabulary a tokenizer may have: ids below 2^24 (the limit ``model.vocab_size`` has too)."""


class Tokenizer(abc.ABC):
    """Text to token ids and back.

    Implementations register themselves with ``register_tokenizers``. ``name`` is
    the registry name (the *kind*): ``save_tokenizer`` records it in the saved
    folder (``alilama_tokenizer.json``) so ``load_tokenizer`` finds the class again.

    What the toolkit calls, and nothing else: ``train`` / ``train_files``
    (``alilama tokenizer train``), ``encode``, ``encode_batch`` (``data prepare``),
    ``encode_file`` (``eval``, ``tokenizer encode``), ``decode``, ``decode_bytes``
    (streaming generation), ``vocab_size``, ``special_tokens``, ``eot_id``,
    ``save``, ``load``, ``describe`` (``tokenizer info``), ``fallback_notice``
    (``tokenizer import``), and the optional ``save_hf`` (``export hf``;
    ``hf_export = True`` declares it). A plugin may also register a
    ``VocabularyImporter`` beside the class (``tokenizer import``).
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[Mapping[str, Any]] = {}
    """Training settings the tokenizer accepts, with their default values (``--option key=value``).

    They reach ``train`` and ``train_files`` as keyword arguments, after
    ``check_options`` refused unknown keys.
    """
    hf_export: ClassVar[bool] = False
    """Whether ``save_hf`` writes a Hugging Face ``tokenizer.json`` (an optional capability)."""

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

    @classmethod
    def train_files(
        cls,
        paths: Sequence[str | PathLike[str]],
        vocab_size: int,
        *,
        special_tokens: Sequence[str] = (),
        threads: int | None = None,
        errors: str = "strict",
        progress: ProgressCallback | None = None,
        read_progress: ProgressCallback | None = None,
        **options: Any,
    ) -> "Tokenizer":
        """``train`` on UTF-8 files (each file one text; override to stream large files).

        ``errors`` is ``"strict"`` (bad UTF-8 raises ``TokenizerError``) or
        ``"replace"``; ``read_progress(done, total)`` counts bytes read.
        """
        texts = []
        total = sum(os.path.getsize(p) for p in paths)
        done = 0
        for p in paths:
            texts.append(read_text(p, errors))
            done += os.path.getsize(p)
            if read_progress is not None:
                read_progress(done, total)
        return cls.train(
            texts, vocab_size, special_tokens=special_tokens, threads=threads, progress=progress, **options
        )

    @classmethod
    def check_options(cls, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """This tokenizer's ``options`` with ``options`` applied; unknown keys raise ``ConfigError``."""
        return check_options("tokenizer", cls.name or cls.__name__, cls.defaults, options)

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

    def encode_file(
        self,
        path: str | PathLike[str],
        *,
        threads: int | None = None,
        errors: str = "strict",
        progress: ProgressCallback | None = None,
    ) -> "np.ndarray":
        """Ids of a UTF-8 file as a 1-D integer numpy array; special tokens in it count as theirs.

        The default reads the file and calls ``encode(text, allowed_special="all")``;
        implementations may stream and use ``threads``.
        """
        import numpy as np  # numpy only when a file is encoded

        text = read_text(path, errors)
        ids = self.encode(text, allowed_special="all")
        if progress is not None:
            progress(len(text), len(text))
        return np.asarray(ids, dtype=token_dtype(self.vocab_size))

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
        return self.special_tokens.get(END_OF_TEXT)

    @abc.abstractmethod
    def save(self, directory: str | PathLike[str]) -> None:
        """Write the tokenizer into ``directory`` (created if missing), atomically per file."""

    @classmethod
    @abc.abstractmethod
    def load(cls, directory: str | PathLike[str]) -> "Tokenizer":
        """Read a tokenizer written by ``save``; a missing or corrupt file raises ``TokenizerError``."""

    def describe(self) -> dict[str, Any]:
        """What ``alilama tokenizer info`` shows: plain JSON-able facts (override to add your own)."""
        return {"kind": self.name, "vocab_size": self.vocab_size, "special_tokens": self.special_tokens}

    def fallback_notice(self) -> str | None:
        """Why this tokenizer runs slower than it could, as one sentence (``None`` when it does not).

        For a tokenizer with a fast implementation and a slower fallback: the
        fallback is in use, and the reason (a native module not built, a
        setting only the fallback knows). ``alilama tokenizer import`` prints
        it as a notice. The default: ``None``.
        """
        return None

    def save_hf(self, directory: str | PathLike[str]) -> Path:
        """Optional (``hf_export = True``): write a Hugging Face ``tokenizer.json`` into ``directory``; its path."""
        raise UnsupportedError(
            f"the {self.name or type(self).__name__!r} tokenizer cannot write a Hugging Face tokenizer.json "
            "(it does not declare hf_export)"
        )


class VocabularyImporter(Protocol):
    """A published vocabulary read as a tokenizer, with its own ids: the optional importer of a tokenizer kind.

    A plugin registers it beside its class, ``register(name, cls, importer=fn)``
    (``fn`` or a lazy ``"module:attr"`` path), and ``alilama tokenizer import
    SOURCE --kind NAME`` calls it (``registry.get_tokenizer_importer``).
    ``source`` is a file, a folder or a name the importer knows; ``pattern``
    (``--pattern``) and ``special_tokens`` (``--special``) are given for a
    source that does not carry them. It returns an instance of ``cls`` and one
    line saying what was read; a source it cannot read exactly raises
    ``TokenizerError`` saying why.
    """

    def __call__(
        self,
        source: str | PathLike[str],
        *,
        pattern: str | None = None,
        special_tokens: dict[str, int] | None = None,
    ) -> tuple[Tokenizer, str]: ...


def read_text(path: str | PathLike[str], errors: str = "strict") -> str:
    """A UTF-8 file's text; a missing file or bad byte raises ``TokenizerError`` naming it."""
    if errors not in ("strict", "replace"):
        raise TokenizerError(f"errors must be 'strict' or 'replace', not {errors!r}")
    p = Path(path)
    if not p.is_file():
        raise TokenizerError(f"no such file: {p}")
    try:
        return p.read_bytes().decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise TokenizerError(f"{p}: invalid UTF-8 at byte offset {exc.start} (use errors='replace')") from None
