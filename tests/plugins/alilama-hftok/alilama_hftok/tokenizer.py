"""A ``Tokenizer`` over Hugging Face ``tokenizers``: byte-level BPE, saved as ``tokenizer.json``."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from alilama_core.base.errors import TokenizerError
from alilama_core.contracts.tokenizer import AllowedSpecial, ProgressCallback, Tokenizer

FILE = "tokenizer.json"


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """The byte-level alphabet: each byte's printable stand-in character, inverted."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    printable = [b for b in range(256) if chr(b) in alphabet]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


class HFByteBPE(Tokenizer):
    name: ClassVar[str] = "hf-bpe"
    defaults: ClassVar[dict[str, Any]] = {"min_frequency": 2}
    hf_export: ClassVar[bool] = True

    def __init__(self, hf) -> None:
        self._hf = hf
        self._special = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        special_tokens: Sequence[str] = (),
        threads: int | None = None,
        progress: ProgressCallback | None = None,
        min_frequency: int = 2,
    ) -> "HFByteBPE":
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        if vocab_size < 256 + len(special_tokens) + 1:
            raise TokenizerError(f"hf-bpe needs a vocab size of at least {257 + len(special_tokens)}, got {vocab_size}")
        hf = HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=list(special_tokens),
        )
        hf.train_from_iterator(list(texts), trainer=trainer)
        if progress is not None:
            progress(hf.get_vocab_size(), vocab_size)
        return cls(hf)

    def _check_specials(self, text: str, allowed_special: AllowedSpecial) -> None:
        allowed = (
            set(self._special)
            if allowed_special == "all"
            else (set() if isinstance(allowed_special, str) else set(allowed_special))
        )
        if allowed_special == "none":
            return
        for token in self._special:
            if token not in allowed and token in text:
                raise TokenizerError(f"the text contains the special token {token!r}; pass allowed_special='all'")

    def encode(self, text: str, allowed_special: AllowedSpecial = "none_raise") -> list[int]:
        self._check_specials(text, allowed_special)
        if allowed_special == "none" and any(t in text for t in self._special):
            ids: list[int] = []
            for i, ch in enumerate(text):  # special strings as plain text: one character at a time
                ids.extend(self._hf.encode(ch, add_special_tokens=False).ids)
            return ids
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts, *, threads=None, allowed_special: AllowedSpecial = "none_raise"):
        for text in texts:
            self._check_specials(text, allowed_special)
        return [e.ids for e in self._hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        table = _unicode_to_byte()
        out = bytearray()
        for i in ids:
            i = int(i)
            piece = self._hf.id_to_token(i)
            if piece is None:
                raise TokenizerError(f"token id {i} is not in the vocabulary")
            if piece in self._special:
                out += piece.encode("utf-8")
            else:
                out += bytes(table[c] for c in piece)
        return bytes(out)

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    @property
    def vocab_size(self) -> int:
        return self._hf.get_vocab_size()

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._special)

    def save(self, directory: str | os.PathLike[str]) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._hf.save(str(directory / FILE))

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> "HFByteBPE":
        from tokenizers import Tokenizer as HFTokenizer

        path = Path(directory) / FILE
        if not path.is_file():
            raise TokenizerError(f"{str(directory)!r} holds no {FILE}: not a saved hf-bpe tokenizer")
        try:
            return cls(HFTokenizer.from_file(str(path)))
        except Exception as exc:  # the tokenizers library raises its own exception types
            raise TokenizerError(f"{str(path)!r} is corrupt: {exc}") from None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "library": "tokenizers"}

    def save_hf(self, directory: str | os.PathLike[str]) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._hf.save(str(directory / FILE))
        return directory / FILE
