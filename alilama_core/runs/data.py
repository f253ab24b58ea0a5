"""Reading prepared data: memory-mapped token files, their meta, and random windows.

A data folder made by ``alilama data prepare`` holds ``train.bin`` and ``val.bin``
(uint16, or uint32 past 65,535 ids) with the end-of-text token after every
document, ``meta.json`` (the tokenizer's hash, the dtype, token and byte counts,
so losses convert to bits per byte) and a copy of the tokenizer in ``tokenizer/``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from alilama_core.contracts.errors import DataError
from alilama_core.contracts.tokenizer import END_OF_TEXT
from alilama_core.runs.tokenizers import tokenizer_hash
from alilama_core.runs.windows import random_windows, window_nll

SEPARATOR = END_OF_TEXT
META = "meta.json"


# -- tokenizer identity and token dtype ----------------------------------------


# -- loading -----------------------------------------------------------------------


class TokenData:
    """A prepared data folder: memory-mapped ``train.bin`` / ``val.bin`` and their meta.

    Bound to a config with ``train_with(cfg)`` it is a ``DataSource``
    (``alilama_core.contracts.data``): random windows of ``context_length + 1``
    tokens of the train split, evaluated on non-overlapping windows of the val split.
    """

    writes_samples = True

    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory)
        self.tokenizer_dir = self.dir / "tokenizer"
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

    # -- the DataSource contract ------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.meta["vocab_size"]

    def train_with(self, cfg) -> TokenData:
        """Bind to ``cfg`` (its context length and ``train.eval_tokens``); both splits must hold a window."""
        self.context = cfg.model.context_length
        self.eval_tokens = cfg.train.eval_tokens
        self.train_tokens, self.val_tokens = self.split("train"), self.split("val")
        check_fits(self.train_tokens, self.context, "train")
        check_fits(self.val_tokens, self.context, "val")
        return self

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The starts of ``n`` random train windows."""
        return rng.integers(0, len(self.train_tokens) - self.context, size=n)

    def collate(self, items):
        return random_windows(self.train_tokens, items, self.context)

    def loss_weight(self, y) -> float:
        return 1.0  # every target is scored: the micro-batch means are equal shares

    def batch(self, rng: np.random.Generator, n: int, device="cpu"):
        x, y = self.collate(self.draw(rng, n))
        return x.to(device), y.to(device)

    def evaluate(self, model) -> dict[str, float]:
        """Mean loss over non-overlapping windows of the val split, and bits per byte."""
        import math

        import torch

        tokens, t = self.val_tokens, model.config.context_length
        limit = self.eval_tokens or len(tokens)
        starts = np.arange(0, min(len(tokens), limit + 1) - t - 1 + 1, t)
        if len(starts) == 0:
            raise DataError(f"the val split has {len(tokens)} tokens, fewer than one window of {t + 1}")
        with torch.no_grad():
            total, count, _ = window_nll(model, tokens, starts, t, batch_size=32)
        loss = total / count
        return {"val_loss": loss, "val_bpb": loss / math.log(2) / self.bytes_per_token("val")}

    def describe(self) -> dict:
        return {
            "data": str(self.dir.resolve()),
            "task": None,
            "data_meta": {k: self.meta.get(k) for k in ("tokenizer_hash", "vocab_size", "dtype", "splits")},
        }

    def inputs(self) -> list[Path]:
        return [self.dir]


def check_fits(tokens: np.ndarray, context: int, name: str) -> None:
    if len(tokens) < context + 1:
        raise DataError(
            f"the {name} split has {len(tokens)} tokens, fewer than one window of "
            f"model.context_length + 1 = {context + 1}; add data or shorten the context"
        )
