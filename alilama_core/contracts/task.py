"""What an algorithmic task is: the ``Task`` contract, its symbol tokenizer, and example lengths."""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from alilama_core.contracts.data import IGNORE_INDEX
from alilama_core.base.errors import ConfigError, TokenizerError
from alilama_core.base.files import atomic_write_text
from alilama_core.base.limits import describe, limit, loads_json
from alilama_core.contracts.tokenizer import Tokenizer


class Task(abc.ABC):
    """An algorithmic task: a symbol vocabulary and a seeded generator of ``(prompt, answer)`` examples.

    A task is trained on and scored like a language model's text, but with no BPE:
    each symbol is one token. An example is laid out as::

        prompt symbols  "="  answer symbols  "<eos>"

    and only the answer and ``<eos>`` are scored (the loss mask), so a model is
    never asked to predict the random prompt. ``length`` is the task's own size
    (items to copy, digits to add, pairs to recall). Worked example::

        class Copy(Task):
            name = "copy"
            defaults = {"symbols": 10}
            @property
            def symbols(self):
                return [str(d) for d in range(self.options["symbols"])]
            def example(self, length, rng):
                prompt = [self.symbols[i] for i in rng.integers(0, len(self.symbols), size=length)]
                return prompt, list(prompt)
            def sequence_length(self, length):
                return 2 * length + 2

    Third-party packages register tasks with ``register_tasks(register)`` and run
    ``alilama_core.kit.task.check_task`` on them.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    """The task's options and their default values; ``task.options`` in a config overrides them."""
    SPECIALS: ClassVar[tuple[str, str, str]] = ("<pad>", "<eos>", "=")
    """Symbols every task has, first in its vocabulary: padding, end of answer, prompt/answer separator."""

    def __init__(self, **options: Any) -> None:

        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            known = ", ".join(sorted(self.defaults)) or "none"
            raise ConfigError(f"task {self.name!r} has no option(s) {', '.join(unknown)}; its options: {known}")
        self.options: dict[str, Any] = {**self.defaults, **options}

    @property
    @abc.abstractmethod
    def symbols(self) -> list[str]:
        """The task's own symbols (the specials are added in front by ``vocabulary``)."""

    @abc.abstractmethod
    def example(self, length: int, rng: Any) -> tuple[list[str], list[str]]:
        """One ``(prompt, answer)`` pair of size ``length``, drawn from ``rng`` (a ``numpy.random.Generator``)."""

    @abc.abstractmethod
    def sequence_length(self, length: int) -> int:
        """Most tokens an example of size ``length`` takes: prompt, ``=``, answer and ``<eos>``."""

    @property
    def max_length(self) -> int | None:
        """Largest ``length`` the task can generate (``None``: unbounded)."""
        return None

    def score(self, predicted: list[str], answer: list[str]) -> bool:
        """Exact match: whether a predicted answer counts as right (default: symbol for symbol)."""
        return list(predicted) == list(answer)

    def vocabulary(self) -> list[str]:
        """Every symbol, specials first; a symbol's index is its token id."""
        return [*self.SPECIALS, *self.symbols]

    def tokenizer(self):
        """A ``Tokenizer`` over ``vocabulary()`` (saved in task runs, so tools can label tokens)."""

        return SymbolTokenizer(self.vocabulary())


IGNORE = IGNORE_INDEX
"""Target id of unscored positions (prompt and padding): the one ``contracts.data.IGNORE_INDEX``."""


PAD, EOS, SEP = 0, 1, 2
"""Token ids of the three specials every task vocabulary starts with."""


Example = tuple[list[int], int]
"""Token ids of one example and the index of its first scored token (the first answer token)."""


class SymbolTokenizer(Tokenizer):
    """One token per symbol of a fixed list (a task's vocabulary); no merges.

    Symbols written ``<like-this>`` are special tokens and follow tiktoken's
    ``allowed_special`` rules. ``encode`` reads symbols greedily, longest first,
    and skips whitespace that is not a symbol; ``decode`` joins symbols, so each
    id decodes to its symbol::

        >>> tok = SymbolTokenizer(["<pad>", "<eos>", "=", "0", "1"])
        >>> tok.encode("01=10")
        [3, 4, 2, 4, 3]
        >>> tok.decode([4, 2, 1])
        '1=<eos>'
    """

    name = "symbols"

    def __init__(self, symbols: Sequence[str]) -> None:
        symbols = list(symbols)
        if not symbols or len(set(symbols)) != len(symbols) or not all(isinstance(s, str) and s for s in symbols):
            raise TokenizerError("symbols must be distinct, non-empty strings")
        self.symbols = symbols
        self.ids = {s: i for i, s in enumerate(symbols)}
        self._specials = {s: i for i, s in enumerate(symbols) if len(s) > 2 and s[0] == "<" and s[-1] == ">"}
        self._longest = max(len(s) for s in symbols)

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, *, special_tokens: Sequence[str] = (), threads=None, progress=None
    ) -> "SymbolTokenizer":
        """The symbols are ``special_tokens``, then every distinct character of ``texts``."""
        chars = sorted({c for text in texts for c in text})
        symbols = [*special_tokens, *(c for c in chars if c not in special_tokens)]
        if len(symbols) > vocab_size:
            raise TokenizerError(f"the texts hold {len(symbols)} symbols, more than vocab_size={vocab_size}")
        return cls(symbols)

    def encode(self, text: str, allowed_special="none_raise") -> list[int]:
        if allowed_special == "all":
            allowed = set(self._specials)
        elif allowed_special in ("none", "none_raise"):
            allowed = set()
        else:
            allowed = set(allowed_special)
        if allowed_special != "none":
            for special in self._specials.keys() - allowed:
                if special in text:
                    raise TokenizerError(
                        f"the text holds the special token {special!r}; pass allowed_special='all' to encode it as one"
                    )
        out, i = [], 0
        while i < len(text):
            for size in range(min(self._longest, len(text) - i), 0, -1):
                piece = text[i : i + size]
                if piece in self.ids and (piece not in self._specials or piece in allowed):
                    out.append(self.ids[piece])
                    i += size
                    break
            else:
                if not text[i].isspace():
                    raise TokenizerError(f"{text[i]!r} at offset {i} is no symbol of this vocabulary")
                i += 1
        return out

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        return "".join(self.symbols[i] for i in ids)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return self.decode(ids).encode("utf-8")

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._specials)

    @property
    def eot_id(self) -> int | None:
        """``<|endoftext|>`` when the vocabulary has it, else a task's ``<eos>``."""
        return self._specials.get("<|endoftext|>", self._specials.get("<eos>"))

    def save(self, directory: str | os.PathLike[str]) -> None:
        data = {"name": self.name, "symbols": self.symbols}
        atomic_write_text(Path(directory) / "tokenizer_config.json", json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> "SymbolTokenizer":
        path = Path(directory) / "tokenizer_config.json"
        try:
            return cls(loads_json(path.read_text(encoding="utf-8"), TokenizerError, repr(str(path)))["symbols"])
        except TokenizerError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TokenizerError(f"{str(path)!r} is no saved symbol tokenizer: {exc}") from None


def parse_lengths(spec: str | int, what: str = "task.lengths") -> tuple[int, int]:
    """``"1-16"`` -> ``(1, 16)``; ``8`` or ``"8"`` -> ``(8, 8)``."""
    text = str(spec).strip()
    lo, sep, hi = text.partition("-")
    try:
        pair = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        raise ConfigError(f"{what} must look like 1-16 or 8, got {spec!r}") from None
    if pair[0] < 1 or pair[1] < pair[0]:
        raise ConfigError(f"{what} must be a range lo-hi with 1 <= lo <= hi, got {spec!r}")
    _check_length(pair[1], f"{what}={spec}")
    return pair


def _check_length(length: int, what: str) -> None:
    if length > limit("MAX_TASK_LENGTH"):
        raise ConfigError(f"{what} asks for examples of length {length:,}: {describe('MAX_TASK_LENGTH')}")


def parse_int_list(spec: str, what: str, example: str = "8,16,32") -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``: positive integers, at most ``MAX_EVAL_LENGTHS`` of them.

    The one parser of comma-separated lengths (``--lengths``, ``--context-lengths``).
    """
    try:
        values = [int(x) for x in str(spec).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, e.g. {example}; got {spec!r}") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{what} needs positive integers, e.g. {example}; got {spec!r}")
    check_length_count(values, what)
    return values


def parse_length_list(spec: str) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``: task lengths to test at."""
    lengths = parse_int_list(spec, "--lengths")
    for length in lengths:
        _check_length(length, "--lengths")
    return lengths


def check_length_count(lengths: Sequence[int], what: str) -> None:
    """Refuse more than ``MAX_EVAL_LENGTHS`` lengths to evaluate at."""
    if len(lengths) > limit("MAX_EVAL_LENGTHS"):
        raise ConfigError(f"{what} gives {len(lengths):,} lengths to evaluate at: {describe('MAX_EVAL_LENGTHS')}")
