"""Data preparation: documents -> token files.

``prepare`` streams documents from text files (separated by a line holding only
``<|endoftext|>``, or one file per document), JSONL files, or a Hugging Face
dataset, encodes them in batches with the tokenizer's threads, and appends the
ids to ``train.bin`` and ``val.bin`` (see ``alilama_core.data`` for the format).
It never holds the corpus in memory. The tokenizer is copied to
``DATA/tokenizer/`` so data and tokenizer travel together.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from alilama_core.data import META, SEPARATOR, DataError, token_dtype, tokenizer_hash
from alilama_core.errors import TokenizerError

# -- reading documents -------------------------------------------------------------


def _decode(raw: bytes, path: Path, offset: int, errors: str) -> str:
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{str(path)!r} is not valid UTF-8 at byte offset {offset + exc.start}; "
            "convert it to UTF-8, or pass --errors replace to substitute U+FFFD"
        ) from None


def read_text_documents(path: Path, separator: str = SEPARATOR, errors: str = "strict") -> Iterator[str]:
    """Documents of a text file: split at lines holding only ``separator``; else the whole file."""
    lines: list[str] = []
    offset = 0
    sep = separator.encode("utf-8")
    with open(path, "rb") as f:
        for raw in f:
            if raw.rstrip(b"\r\n") == sep:
                doc = "".join(lines).strip("\n")
                if doc:
                    yield doc
                lines = []
            else:
                lines.append(_decode(raw, path, offset, errors))
            offset += len(raw)
    doc = "".join(lines).strip("\n")
    if doc:
        yield doc


def read_jsonl_documents(path: Path, field: str = "text", errors: str = "strict") -> Iterator[str]:
    offset = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            line = _decode(raw, path, offset, errors).strip()
            offset += len(raw)
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{str(path)!r} line {number} is not valid JSON: {exc}") from None
            if not isinstance(record, dict) or field not in record:
                raise DataError(f"{str(path)!r} line {number} has no field {field!r} (use --field NAME)")
            if not isinstance(record[field], str):
                raise DataError(f"{str(path)!r} line {number}: field {field!r} is not a string")
            if record[field]:
                yield record[field]


def read_hf_documents(spec: str, field: str = "text", split: str = "train") -> Iterator[str]:
    """``hf:NAME`` (a Hub dataset, streamed) or ``hf:PATH`` (a dataset saved with ``save_to_disk``)."""
    try:
        import datasets
    except ImportError:
        raise DataError("hf: inputs need the `datasets` package: pip install datasets") from None
    name = spec[3:]
    if Path(name).exists():
        ds = datasets.load_from_disk(name)
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DataError(f"dataset {name!r} has no split {split!r}; splits: {', '.join(ds)}")
            ds = ds[split]
    else:
        ds = datasets.load_dataset(name, split=split, streaming=True)
    for record in ds:
        if field not in record:
            raise DataError(f"dataset {name!r} has no field {field!r}; fields: {', '.join(record)}")
        if record[field]:
            yield record[field]


def iter_documents(
    inputs: Sequence[str], field: str = "text", separator: str = SEPARATOR, errors: str = "strict"
) -> Iterator[str]:
    for spec in inputs:
        if spec.startswith("hf:"):
            yield from read_hf_documents(spec, field)
            continue
        path = Path(spec)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif path.is_file():
            files = [path]
        else:
            raise DataError(f"input {spec!r} does not exist")
        for file in files:
            if file.suffix == ".jsonl":
                yield from read_jsonl_documents(file, field, errors)
            else:
                yield from read_text_documents(file, separator, errors)


# -- preparing ------------------------------------------------------------


@dataclass
class SplitStats:
    tokens: int = 0
    bytes: int = 0
    documents: int = 0


def prepare(
    inputs: Sequence[str],
    tokenizer_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    val_fraction: float = 0.05,
    field: str = "text",
    separator: str = SEPARATOR,
    errors: str = "strict",
    seed: int = 0,
    threads: int | None = None,
    batch_documents: int = 2048,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Encode ``inputs`` into ``out``; returns the meta dict. ``progress(bytes)`` is called per batch."""
    from alilama_core.checkpoint import load_tokenizer

    if not 0 <= val_fraction < 1:
        raise DataError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise DataError(f"{str(out)!r} already exists and is not empty; choose another folder or pass --overwrite")
    tokenizer = load_tokenizer(tokenizer_dir)
    eot = tokenizer.eot_id
    if eot is None:
        raise TokenizerError("the tokenizer has no <|endoftext|> token; train it with --special '<|endoftext|>'")
    dtype = token_dtype(tokenizer.vocab_size)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        stats = {"train": SplitStats(), "val": SplitStats()}
        rng = random.Random(seed)
        files = {name: open(work / f"{name}.bin", "wb") for name in stats}
        try:
            batch: list[str] = []

            def flush() -> None:
                encoded = tokenizer.encode_batch(batch, threads=threads, allowed_special="none")
                for doc, ids in zip(batch, encoded):
                    split = "val" if rng.random() < val_fraction else "train"
                    arr = np.asarray([*ids, eot], dtype=dtype)
                    arr.tofile(files[split])
                    s = stats[split]
                    s.tokens += arr.size
                    s.bytes += len(doc.encode("utf-8"))
                    s.documents += 1
                if progress:
                    progress(sum(len(d.encode("utf-8")) for d in batch))
                batch.clear()

            for doc in iter_documents(inputs, field, separator, errors):
                batch.append(doc)
                if len(batch) >= batch_documents:
                    flush()
            if batch:
                flush()
        finally:
            for f in files.values():
                f.close()
        if stats["train"].documents == 0:
            raise DataError(f"no documents found in {', '.join(map(str, inputs))}: the input is empty")
        if val_fraction > 0 and stats["val"].documents == 0:
            # Tiny corpora: move nothing silently; say what happened.
            raise DataError(
                f"no document fell into the validation split ({stats['train'].documents} documents, "
                f"--val-fraction {val_fraction}); add data or raise --val-fraction"
            )
        shutil.copytree(tokenizer_dir, work / "tokenizer")
        meta = {
            "format": 1,
            "tokenizer_hash": tokenizer_hash(work / "tokenizer"),
            "vocab_size": tokenizer.vocab_size,
            "eot_id": eot,
            "dtype": dtype.name,
            "val_fraction": val_fraction,
            "seed": seed,
            "sources": [str(i) for i in inputs],
            "splits": {name: vars(s) for name, s in stats.items()},
        }
        (work / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(work, out)
        return meta
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
