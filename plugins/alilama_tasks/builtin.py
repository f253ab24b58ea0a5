"""The built-in tasks. ``length`` is the number of items the model must process.

Symbols are single characters, so a prompt reads like text (``3141=1413``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from alilama_core.base.errors import ConfigError
from alilama_core.contracts.task import Task

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _count(value: Any, name: str, task: str, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigError(f"task {task!r}: option {name} must be an integer in {lo}..{hi}, got {value!r}")
    return value


class _Sequence(Task):
    """A string of ``length`` symbols drawn uniformly from ``symbols`` letters, answered by ``transform``."""

    defaults: ClassVar[dict[str, Any]] = {"symbols": 10}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._symbols = list(ALPHABET[: _count(self.options["symbols"], "symbols", self.name, 2, len(ALPHABET))])

    @property
    def symbols(self) -> list[str]:
        return self._symbols

    def transform(self, prompt: list[str]) -> list[str]:
        raise NotImplementedError

    def example(self, length, rng):
        prompt = [self._symbols[i] for i in rng.integers(0, len(self._symbols), size=length)]
        return prompt, self.transform(prompt)

    def sequence_length(self, length: int) -> int:
        return 2 * length + 2


class Copy(_Sequence):
    """``3141=3141``: the answer repeats the prompt; each answer token reads one earlier position."""

    name, description = "copy", "repeat the prompt"

    def transform(self, prompt):
        return list(prompt)


class Reverse(_Sequence):
    """``3141=1413``: the prompt backwards; the position read moves away as the answer grows."""

    name, description = "reverse", "the prompt backwards"

    def transform(self, prompt):
        return prompt[::-1]


class Sort(_Sequence):
    """``3141=1134``: the prompt's symbols in alphabet order; reading the tape by content, not position."""

    name, description = "sort", "the prompt's symbols in order"

    def transform(self, prompt):
        return sorted(prompt, key=self._symbols.index)


class Addition(Task):
    """``123+989=1112``: two numbers of exactly ``length`` digits and their sum.

    With ``reversed`` (the default) every number is written least-significant
    digit first (``321+989=2111``), so the carry flows in reading order.
    """

    name, description = "addition", "the sum of two numbers of `length` digits"
    defaults: ClassVar[dict[str, Any]] = {"reversed": True}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if not isinstance(self.options["reversed"], bool):
            raise ConfigError(
                f"task 'addition': option reversed must be true or false, got {self.options['reversed']!r}"
            )

    @property
    def symbols(self) -> list[str]:
        return [*"0123456789", "+"]

    def example(self, length, rng):
        digits = rng.integers(0, 10, size=(2, length))  # (2, length)
        digits[:, 0] = rng.integers(1 if length > 1 else 0, 10, size=2)  # no leading zero
        a, b = ("".join(map(str, row)) for row in digits)
        total = str(int(a) + int(b))
        if self.options["reversed"]:
            a, b, total = a[::-1], b[::-1], total[::-1]
        return [*a, "+", *b], list(total)

    def sequence_length(self, length: int) -> int:
        return (2 * length + 1) + 1 + (length + 1) + 1


class Recall(Task):
    """``a3c1b7?c=1``: ``length`` distinct keys, each followed by its value, then a key: answer its value.

    Keys are letters, values digits; this is reading the tape by content (a
    lookup), where copy reads by position.
    """

    name, description = "recall", "the value stored under a key, given `length` key-value pairs"
    defaults: ClassVar[dict[str, Any]] = {"keys": 26}
    KEYS = ALPHABET[10:]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._keys = list(self.KEYS[: _count(self.options["keys"], "keys", self.name, 2, len(self.KEYS))])

    @property
    def symbols(self) -> list[str]:
        return [*"0123456789", *self._keys, "?"]

    @property
    def max_length(self) -> int:
        return len(self._keys)

    def example(self, length, rng):
        keys = rng.choice(len(self._keys), size=length, replace=False)
        values = rng.integers(0, 10, size=length)
        query = int(rng.integers(0, length))
        prompt = [s for k, v in zip(keys, values) for s in (self._keys[k], str(v))]
        return [*prompt, "?", self._keys[keys[query]]], [str(values[query])]

    def sequence_length(self, length: int) -> int:
        return 2 * length + 2 + 1 + 1 + 1


class Parity(Task):
    """``10110=1``: whether a bit string has an odd number of ones.

    One answer token that depends on every input bit: a count, not a lookup,
    which attention-only reading of the tape does not give for free.
    """

    name, description = "parity", "whether a bit string holds an odd number of ones"

    @property
    def symbols(self) -> list[str]:
        return ["0", "1"]

    def example(self, length, rng):
        bits = rng.integers(0, 2, size=length)
        return [str(b) for b in bits], [str(int(bits.sum()) % 2)]

    def sequence_length(self, length: int) -> int:
        return length + 3
