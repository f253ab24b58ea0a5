"""The prepared data folder: written (``write_data``) and read (``TokenData``) here, and nowhere else.

A data folder made by ``alilama data prepare`` holds ``train.bin`` and ``val.bin``
(uint16, or uint32 past 65,535 ids) with the end-of-text token after every
document, ``meta.json`` (the tokenizer's hash, the dtype, token and byte counts,
so losses convert to bits per byte) and a copy of the tokenizer in ``tokenizer/``.
It is built beside its final place and swapped in whole, under the folder's
lock; the command that reads the documents is ``alilama_core.app.prepare``::

    with write_data(out, tokenizer, overwrite=False, inputs=[corpus, tokenizer_dir]) as data:
        data.append("train", tokenizer.encode(text), len(text.encode("utf-8")), ends_document=True)
        data.finish(tokenizer_dir, val_fraction=0.05, split="documents", seed=0, sources=[corpus])
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from alilama_core.base.errors import DataError
from alilama_core.base.files import disk_full_guard, exclusive_lock
from alilama_core.contracts.data import token_dtype
from alilama_core.contracts.tokenizer import END_OF_TEXT
from alilama_core.runs.outputs import building, check_output
from alilama_core.runs.tokenizers import tokenizer_hash
from alilama_core.runs.windows import random_windows, window_nll

SEPARATOR = END_OF_TEXT
META = "meta.json"
TOKENIZER = "tokenizer"
SPLITS = ("train", "val")
FORMAT = 1


def split_file(name: str) -> str:
    """The token file of split ``name``: ``train.bin``, ``val.bin``."""
    return f"{name}.bin"


# -- writing ---------------------------------------------------------------------------------


@dataclass
class SplitStats:
    """What ``meta.json`` records of one split: its tokens, the UTF-8 bytes they encode, its documents."""

    tokens: int = 0
    bytes: int = 0
    documents: int = 0

    @classmethod
    def total(cls, stats) -> SplitStats:
        """The sum of several ``SplitStats`` (train and val)."""
        stats = list(stats)
        return cls(**{f.name: sum(getattr(s, f.name) for s in stats) for f in fields(cls)})


class DataWriter:
    """The files of a data folder being built in ``work`` (see ``write_data``)."""

    def __init__(self, work: Path, tokenizer):
        self.work, self.tokenizer = work, tokenizer
        self.eot = tokenizer.eot_id
        self.dtype = token_dtype(tokenizer.vocab_size)
        self.stats = {name: SplitStats() for name in SPLITS}
        self._files = {name: open(work / split_file(name), "wb") for name in SPLITS}

    def append(self, split: str, ids: Sequence[int], nbytes: int, ends_document: bool) -> None:
        """Append one piece of a document (``nbytes`` of UTF-8 text) to ``split``; the end-of-text token after
        its last piece."""
        arr = np.asarray(ids, dtype=self.dtype)
        if ends_document:
            arr = np.append(arr, np.asarray(self.eot, dtype=self.dtype))
        self._files[split].write(arr.tobytes())  # Python's write keeps the errno of a full disk; tofile does not
        s = self.stats[split]
        s.tokens += arr.size
        s.bytes += nbytes
        s.documents += ends_document

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    def split_by_position(self, val_fraction: float, block: int = 1 << 20) -> None:
        """Move the last ``val_fraction`` of ``train.bin``'s tokens to ``val.bin``, a block at a time."""
        self.close()
        dtype, tokenizer = self.dtype, self.tokenizer
        train = self.work / split_file("train")
        n = train.stat().st_size // dtype.itemsize
        cut = n - int(round(n * val_fraction))
        specials = set(tokenizer.special_tokens.values())  # special tokens count zero bytes, as in eval
        byte_lengths = np.array(
            [0 if i in specials else len(tokenizer.decode_bytes([i])) for i in range(tokenizer.vocab_size)],
            dtype=np.int64,
        )
        moved_bytes = 0
        tokens = np.memmap(train, dtype=dtype, mode="r") if n else np.zeros(0, dtype)
        with open(self.work / split_file("val"), "wb") as f:
            for start in range(cut, n, block):
                chunk = np.asarray(tokens[start : start + block])
                f.write(chunk.tobytes())
                moved_bytes += int(byte_lengths[chunk].sum())
        del tokens
        os.truncate(train, cut * dtype.itemsize)
        t, v = self.stats["train"], self.stats["val"]
        v.tokens, v.bytes = n - cut, moved_bytes
        t.tokens, t.bytes = cut, t.bytes - moved_bytes

    def finish(self, tokenizer_dir: str | os.PathLike[str], **details: Any) -> dict:
        """Copy the tokenizer in and write ``meta.json`` with ``details`` (how the data was split, its sources).

        Returns the meta dict.
        """
        self.close()
        shutil.copytree(tokenizer_dir, self.work / TOKENIZER, ignore=shutil.ignore_patterns(".*"))
        meta = {
            "format": FORMAT,
            "tokenizer_hash": tokenizer_hash(self.work / TOKENIZER),
            "vocab_size": self.tokenizer.vocab_size,
            "eot_id": self.eot,
            "dtype": self.dtype.name,
            **details,
            "splits": {name: vars(s) for name, s in self.stats.items()},
        }
        (self.work / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return meta


@contextmanager
def write_data(
    out: str | os.PathLike[str],
    tokenizer,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
) -> Iterator[DataWriter]:
    """Write the data folder ``out`` whole, or not at all, with ``tokenizer``'s ids.

    Holds ``out``'s lock, checks again (locked) that it may be written (see
    ``runs.outputs.check_output``; ``inputs`` are never overwritten), and yields a
    ``DataWriter`` on a folder beside ``out``; call its ``finish`` before the block
    ends. The folder is then marked and swapped in; on any error nothing is kept
    and ``out`` is as it was. A full disk is one ``DiskFullError``.
    """
    out, inputs = Path(out), list(inputs)
    with disk_full_guard(out, "data folder"), exclusive_lock(out, "data folder"):
        check_output(out, "data", overwrite, inputs=inputs)
        with building(out, "data", "data folder") as work:
            writer = DataWriter(work, tokenizer)
            try:
                yield writer
            finally:
                writer.close()
            if not (work / META).is_file():
                raise RuntimeError("write_data: the block ended without DataWriter.finish()")


# -- reading ---------------------------------------------------------------------------------


class TokenData:
    """A prepared data folder: memory-mapped ``train.bin`` / ``val.bin`` and their meta.

    Bound to a config with ``train_with(cfg)`` it is a ``DataSource``
    (``alilama_core.contracts.data``): random windows of ``context_length + 1``
    tokens of the train split, evaluated on non-overlapping windows of the val split.
    """

    writes_samples = True

    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory)
        self.tokenizer_dir = self.dir / TOKENIZER
        if not (self.dir / META).is_file():
            raise DataError(
                f"{str(self.dir)!r} is not a prepared data folder (no {META}); "
                "run `alilama data prepare --input ... --tokenizer ... --out DIR` first"
            )
        self.meta = json.loads((self.dir / META).read_text(encoding="utf-8"))
        self.dtype = np.dtype(self.meta["dtype"])
        if tokenizer_hash(self.tokenizer_dir) != self.meta["tokenizer_hash"]:
            raise DataError(
                f"the tokenizer in {str(self.tokenizer_dir)!r} does not match the one the data was "
                "prepared with (hash differs); prepare the data again with this tokenizer"
            )

    def split(self, name: str) -> np.memmap:
        path = self.dir / split_file(name)
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
