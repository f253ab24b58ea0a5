"""Data preparation: documents -> token files.

``prepare`` streams documents from text files (separated by a line holding only
``<|endoftext|>``, or one file per document), JSONL files, or a Hugging Face
dataset, encodes them in batches with the tokenizer's threads, and appends the
ids to ``train.bin`` and ``val.bin`` (see ``alilama_core.runs.data`` for the format).
It never holds the corpus in memory: a long document (a whole book) is read and
encoded in pieces of about a million characters, cut before a line that starts
with a visible character, where the BPE pre-tokenizer always splits, so the
tokens are those of the whole document. The tokenizer is copied to
``DATA/tokenizer/`` so data and tokenizer travel together.

Documents go to train or validation at random (``--val-fraction``, ``--seed``).
When too few documents for that reach the validation split (one book, one play),
the split is by position instead: the last ``--val-fraction`` of all tokens go
to validation, as nanoGPT does, and ``meta.json`` says ``"split": "position"``.
With ``--val-input`` the split is given instead: every document of ``--input``
goes to train and every document of ``--val-input`` to validation
(``"split": "given"``), e.g. TinyStories' own ``train.txt`` and ``valid.txt``.

The folder itself (its files, ``meta.json``, the tokenizer's copy, writing it
whole under its lock) is ``alilama_core.runs.data.write_data``; ``overwrite``
replaces only a data folder that Alilama wrote (see ``alilama_core.runs.outputs``).
"""

from __future__ import annotations

import codecs
import itertools
import json
import os
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from alilama_core.base.errors import DataError, TokenizerError
from alilama_core.runs.data import SEPARATOR, DataWriter, SplitStats, write_data
from alilama_core.runs.outputs import check_output

ERRORS = ("strict", "replace", "ignore")
PIECE_CHARS = 1 << 20
"""A document longer than this is read and encoded in pieces of about this many characters."""
BATCH_BYTES = 8 << 20
"""Text encoded per batch at most (bounds the memory of the ids in flight)."""
DEFAULT_VAL_FRACTION = 0.05
"""Share of documents drawn for validation when ``--val-input`` does not give them."""

# -- reading documents -------------------------------------------------------------


def _decode(raw: bytes, path: Path, offset: int, errors: str) -> str:
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{str(path)!r} is not valid UTF-8 at byte offset {offset + exc.start}; "
            "convert it to UTF-8, or pass --errors replace to substitute U+FFFD"
        ) from None


def check_errors(errors: str) -> None:
    """Refuse an unknown ``--errors`` value before any work starts."""
    if errors not in ERRORS:
        raise DataError(f"--errors must be one of {', '.join(ERRORS)}; got {errors!r}")
    codecs.lookup_error(errors)


def read_text_pieces(
    path: Path, separator: str = SEPARATOR, errors: str = "strict", piece_chars: int = PIECE_CHARS
) -> Iterator[tuple[str, bool]]:
    """A text file's documents as ``(text, ends_document)`` pieces, in bounded memory.

    Documents are split at lines holding only ``separator`` (else the file is one
    document) and stripped of surrounding newlines. A document longer than
    ``piece_chars`` comes in several pieces, each cut before a line that starts
    with a visible character; joined, the pieces are the document.
    """
    lines: list[str] = []
    size, offset, started = 0, 0, False
    sep = separator.encode("utf-8")

    def cut(last: bool) -> Iterator[tuple[str, bool]]:
        nonlocal lines, size, started
        piece = "".join(lines)
        lines, size = [], 0
        if not started:
            piece = piece.lstrip("\n")
        if last:
            piece = piece.rstrip("\n")
        if piece or (last and started):
            yield piece, last
        started = False if last else started or bool(piece)

    with open(path, "rb") as f:
        for raw in f:
            if raw.rstrip(b"\r\n") == sep:
                yield from cut(last=True)
            else:
                line = _decode(raw, path, offset, errors)
                if size >= piece_chars and line[:1] and not line[0].isspace():
                    yield from cut(last=False)
                lines.append(line)
                size += len(line)
            offset += len(raw)
    yield from cut(last=True)


def read_text_documents(path: Path, separator: str = SEPARATOR, errors: str = "strict") -> Iterator[str]:
    """Documents of a text file: split at lines holding only ``separator``; else the whole file."""
    parts: list[str] = []
    for piece, last in read_text_pieces(path, separator, errors):
        parts.append(piece)
        if last:
            yield "".join(parts)
            parts = []


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
        yield from _records(ds, name, field)
        return
    try:
        ds = datasets.load_dataset(name, split=split, streaming=True)
        yield from _records(ds, name, field)  # streaming: the Hub is asked while reading, too
    except Exception as exc:
        if not _unreachable(exc):
            raise
        raise DataError(
            f"could not reach dataset {name!r} on the Hugging Face Hub ({_reason(exc)}); check the network "
            "connection (or HF_ENDPOINT, HTTPS_PROXY). To work offline, give local files instead: --input FILE "
            "or FOLDER, or --input hf:PATH for a dataset saved with datasets' save_to_disk"
        ) from None


def _records(ds, name: str, field: str) -> Iterator[str]:
    for record in ds:
        if field not in record:
            raise DataError(f"dataset {name!r} has no field {field!r}; fields: {', '.join(record)}")
        if record[field]:
            yield record[field]


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (from datasets or huggingface_hub) means the Hub could not be reached."""
    import sys

    kinds: list[type] = [ConnectionError, TimeoutError]
    for module, names in (
        ("huggingface_hub.errors", ("OfflineModeIsEnabled", "LocalEntryNotFoundError")),
        ("requests.exceptions", ("ConnectionError", "Timeout")),
        ("httpx", ("TransportError",)),
    ):
        loaded = sys.modules.get(module)  # only a client already in use can have raised
        kinds += [getattr(loaded, n) for n in names if loaded is not None and hasattr(loaded, n)]
    seen = 0
    while exc is not None and seen < 8:  # the cause may be wrapped
        if isinstance(exc, tuple(kinds)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _files(spec: str) -> list[Path]:
    path = Path(spec)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if path.is_file():
        return [path]
    raise DataError(f"input {spec!r} does not exist")


def iter_pieces(
    inputs: Sequence[str], field: str = "text", separator: str = SEPARATOR, errors: str = "strict"
) -> Iterator[tuple[str, bool]]:
    """Every document of ``inputs`` as ``(text, ends_document)`` pieces (see ``read_text_pieces``)."""
    for spec in inputs:
        if spec.startswith("hf:"):
            for doc in read_hf_documents(spec, field):
                yield doc, True
            continue
        for file in _files(spec):
            if file.suffix == ".jsonl":
                for doc in read_jsonl_documents(file, field, errors):
                    yield doc, True
            else:
                yield from read_text_pieces(file, separator, errors)


def iter_documents(
    inputs: Sequence[str], field: str = "text", separator: str = SEPARATOR, errors: str = "strict"
) -> Iterator[str]:
    for spec in inputs:
        if spec.startswith("hf:"):
            yield from read_hf_documents(spec, field)
            continue
        for file in _files(spec):
            if file.suffix == ".jsonl":
                yield from read_jsonl_documents(file, field, errors)
            else:
                yield from read_text_documents(file, separator, errors)


# -- preparing ------------------------------------------------------------


def prepare(
    inputs: Sequence[str],
    tokenizer_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    val_fraction: float | None = None,
    field: str = "text",
    separator: str = SEPARATOR,
    errors: str = "strict",
    seed: int = 0,
    threads: int | None = None,
    batch_documents: int = 2048,
    overwrite: bool = False,
    progress: Callable[[SplitStats], None] | None = None,
    val_inputs: Sequence[str] = (),
) -> dict:
    """Encode ``inputs`` into ``out``; returns the meta dict.

    ``progress(done)`` is called after each batch with the documents, bytes and tokens encoded so far
    (a ``SplitStats`` of both splits together).

    ``val_fraction`` (default 0.05) draws validation documents from ``inputs``; ``val_inputs``
    gives them instead (``val_fraction`` must then be unset or 0).

    Every argument is checked before anything is read or written.
    """
    from alilama_core.runs.tokenizers import load_tokenizer

    val_inputs = list(val_inputs)
    if val_inputs and val_fraction:
        raise DataError(
            f"--val-input gives the validation documents, so --val-fraction {val_fraction} has nothing to draw; "
            "give one of the two"
        )
    val_fraction = (0.0 if val_inputs else DEFAULT_VAL_FRACTION) if val_fraction is None else val_fraction
    if not 0 <= val_fraction < 1:
        raise DataError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    check_errors(errors)
    if not inputs:
        raise DataError("give at least one --input")
    for spec in [*inputs, *val_inputs]:
        if not spec.startswith("hf:") and not Path(spec).exists():
            raise DataError(f"input {spec!r} does not exist")
    check_val_inputs(inputs, val_inputs)
    if not separator:
        raise DataError("--separator must not be empty")
    out = Path(out)
    check_output(out, "data", overwrite, inputs=[*inputs, *val_inputs, str(tokenizer_dir)])
    tokenizer = load_tokenizer(tokenizer_dir)
    eot = tokenizer.eot_id
    if eot is None:
        raise TokenizerError("the tokenizer has no <|endoftext|> token; train it with --special '<|endoftext|>'")
    with write_data(out, tokenizer, overwrite, inputs=[*inputs, *val_inputs, str(tokenizer_dir)]) as data:
        return _encode_into(
            data,
            inputs,
            tokenizer,
            tokenizer_dir,
            val_fraction,
            field,
            separator,
            errors,
            seed,
            threads,
            batch_documents,
            progress,
            val_inputs,
        )


def check_val_inputs(inputs: Sequence[str], val_inputs: Sequence[str]) -> None:
    """Refuse a ``--val-input`` that is, or holds, a file of ``--input`` (by another path or a link too):
    the model would be validated on documents it trains on."""

    def sources(spec: str) -> dict[tuple, Path]:
        """Each file of ``spec`` by its device and inode; an ``hf:`` dataset by its name (always its train split)."""
        if spec.startswith("hf:"):
            name = Path(spec[3:])
            return {("hf", str(name.resolve()) if name.exists() else spec[3:]): name}
        return {(st.st_dev, st.st_ino): f for f in _files(spec) for st in [f.stat()]}

    trained = {key: (spec, file) for spec in inputs for key, file in sources(spec).items()}
    for spec in val_inputs:
        for key, file in sources(spec).items():
            if key not in trained:
                continue
            given, its = trained[key]
            kind = "dataset" if key[0] == "hf" else "file"
            if kind == "dataset" or (Path(spec) == file and Path(given) == its):
                same = f"--val-input {spec!r} is the same {kind} as --input {given!r}"
            else:
                same = f"--val-input {spec!r} and --input {given!r} both hold the file {str(file)!r}"
            raise DataError(
                f"{same}: the model would be validated on documents it trains on. Give validation documents "
                "that are not in --input, or leave --val-input out to draw --val-fraction of the input's "
                "documents for validation"
            )


def _encode_into(
    data: DataWriter,
    inputs,
    tokenizer,
    tokenizer_dir,
    val_fraction,
    field,
    separator,
    errors,
    seed,
    threads,
    batch_documents,
    progress,
    val_inputs=(),
) -> dict:
    stats = data.stats
    rng = random.Random(seed)
    batch: list[tuple[str, str, bool]] = []  # (text, split, ends_document)
    batch_bytes = 0

    def flush() -> None:
        encoded = tokenizer.encode_batch([text for text, _, _ in batch], threads=threads, allowed_special="none")
        for i, ((text, split, last), ids) in enumerate(zip(batch, encoded)):
            encoded[i] = None  # free each piece's ids as soon as they are written
            data.append(split, ids, len(text.encode("utf-8")), last)
        if progress:
            progress(SplitStats.total(stats.values()))
        batch.clear()

    split = None
    given = itertools.chain(
        ((piece, "train") for piece in iter_pieces(inputs, field, separator, errors)),
        ((piece, "val") for piece in iter_pieces(val_inputs, field, separator, errors)),
    )
    for (text, last), source in given:
        if split is None:  # a new document: one draw per document, in order
            split = source if val_inputs else "val" if rng.random() < val_fraction else "train"
        batch.append((text, split, last))
        batch_bytes += len(text)
        if last:
            split = None
        if len(batch) >= batch_documents or batch_bytes >= BATCH_BYTES:
            flush()
            batch_bytes = 0
    if batch:
        flush()
    data.close()
    documents = stats["train"].documents + stats["val"].documents
    if documents == 0:
        raise DataError(f"no documents found in {', '.join(map(str, inputs))}: the input is empty")
    how = "given" if val_inputs else "documents"
    if val_inputs and stats["val"].tokens == 0:
        raise DataError(f"no documents found in --val-input {', '.join(map(str, val_inputs))}: it is empty")
    if val_fraction > 0 and stats["val"].documents == 0:
        how = "position"  # one book, one play: nanoGPT's split
        data.split_by_position(val_fraction)
        if stats["val"].tokens == 0 or stats["train"].tokens == 0:
            raise DataError(
                f"the input holds {stats['train'].tokens + stats['val'].tokens} tokens: too few to split "
                f"with --val-fraction {val_fraction}; add data"
            )
    return data.finish(
        tokenizer_dir,
        val_fraction=val_fraction,
        split=how,
        seed=seed,
        sources=[str(i) for i in inputs],
        **({"val_sources": [str(i) for i in val_inputs]} if val_inputs else {}),
    )
