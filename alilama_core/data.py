"""Reading prepared data: memory-mapped token files, their meta, and random windows.

A data folder made by ``alilama data prepare`` holds ``train.bin`` and ``val.bin``
(uint16, or uint32 past 65,535 ids) with the end-of-text token after every
document, ``meta.json`` (the tokenizer's hash, the dtype, token and byte counts,
so losses convert to bits per byte) and a copy of the tokenizer in ``tokenizer/``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from alilama_core.errors import AlilamaError
from alilama_core.tokenizer import END_OF_TEXT

SEPARATOR = END_OF_TEXT
META = "meta.json"


class DataError(AlilamaError, ValueError):
    """Bad or missing training data."""


# -- tokenizer identity and token dtype ----------------------------------------


def tokenizer_hash(directory: str | os.PathLike[str]) -> str:
    """SHA-256 over a tokenizer folder's files (names and contents)."""
    digest = hashlib.sha256()
    for file in sorted(Path(directory).iterdir()):
        if file.is_file() and not file.name.startswith("."):
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


# -- loading -----------------------------------------------------------------------


class TokenData:
    """A prepared data folder: memory-mapped ``train.bin`` / ``val.bin`` and their meta."""

    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory)
        if not (self.dir / META).is_file():
            raise DataError(
                f"{str(self.dir)!r} is not a prepared data folder (no {META}); "
                "run `alilama data prepare --input ... --tokenizer ... --out DIR` first"
            )
        self.meta = json.loads((self.dir / META).read_text(encoding="utf-8"))
        self.dtype = np.dtype(self.meta["dtype"])
        if tokenizer_hash(self.dir / "tokenizer") != self.meta["tokenizer_hash"]:
            raise DataError(
                f"the tokenizer in {str(self.dir / 'tokenizer')!r} does not match the one the data was "
                "prepared with (hash differs); prepare the data again with this tokenizer"
            )

    def split(self, name: str) -> np.memmap:
        path = self.dir / f"{name}.bin"
        if not path.is_file() or path.stat().st_size == 0:
            raise DataError(f"{str(path)!r} is missing or empty")
        return np.memmap(path, dtype=self.dtype, mode="r")

    def bytes_per_token(self, name: str) -> float:
        s = self.meta["splits"][name]
        return s["bytes"] / max(1, s["tokens"])


def check_fits(tokens: np.ndarray, context: int, name: str) -> None:
    if len(tokens) < context + 1:
        raise DataError(
            f"the {name} split has {len(tokens)} tokens, fewer than one window of "
            f"model.context_length + 1 = {context + 1}; add data or shorten the context"
        )


def random_windows(tokens: np.ndarray, starts: np.ndarray, context: int):
    """``x``, ``y`` int64 tensors ``(B, T)``: windows at ``starts`` and the same shifted by one."""
    import torch

    rows = np.stack([tokens[s : s + context + 1] for s in starts]).astype(np.int64)  # (B, T+1)
    block = torch.from_numpy(rows)
    return block[:, :-1], block[:, 1:]
