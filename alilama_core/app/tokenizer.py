"""``alilama tokenizer``: train, encode, decode and inspect any registered tokenizer.

Every command works through the ``Tokenizer`` interface, so a tokenizer that a
plugin registers is trained with ``--kind NAME`` and used like the built-in
``bpe``; ``tokenizer import --kind NAME`` calls the vocabulary importer that
plugin registers beside its class. A saved folder records its kind, so the
other commands need only the folder. No torch here: the commands start fast.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from alilama_core.app.common import clean_errors, console, err_console, help_examples
from alilama_core.base.errors import TokenizerError

tokenizer_app = typer.Typer(
    no_args_is_help=True,
    help="Train, encode, decode and inspect tokenizers (any registered kind; default bpe).",
    epilog=help_examples(
        "alilama tokenizer train --input corpus.txt --vocab-size 4096 --out tok/",
        "alilama tokenizer info --tokenizer tok/",
    ),
)

TokenizerDir = Annotated[
    Path, typer.Option("--tokenizer", "-t", help="Folder written by `tokenizer train` (or a BPE .model file).")
]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", "-j", help="Threads (default: all cores).")]
ErrorsOpt = Annotated[
    str, typer.Option("--errors", help="On invalid UTF-8: 'strict' (stop with an error) or 'replace' (use U+FFFD).")
]


def _clean_errors(fn):
    """``clean_errors`` around a command also when it is called outside the root app."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with clean_errors():
            return fn(*args, **kwargs)

    return wrapper


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )


def load(path: str | Path):
    """The tokenizer saved in ``path`` (a folder of any registered kind, or a BPE ``.model`` file)."""
    from alilama_core.engine.registry import get_tokenizer
    from alilama_core.runs.tokenizers import load_tokenizer

    path = Path(path)
    if path.is_file():
        if path.suffix != ".model":
            raise TokenizerError(f"{str(path)!r} is a file; give a tokenizer folder (or a BPE .model file)")
        return get_tokenizer("bpe").load(path)
    if not path.exists():
        raise TokenizerError(f"no such tokenizer folder or file: {path}")
    return load_tokenizer(path)


def parse_options(items: list[str] | None) -> dict[str, Any]:
    """``key=value`` strings to a dict (values read as YAML: ``4``, ``0.1``, ``true``, ``null``)."""
    import yaml

    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise TokenizerError(f"--option {item!r} must look like key=value")
        try:
            options[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            options[key.strip()] = raw
    return options


@tokenizer_app.command(
    epilog=help_examples(
        "alilama tokenizer train --input corpus.txt --vocab-size 4096 --out tok/",
        "alilama tokenizer train -i corpus.txt -v 4096 -o tok/ -s '<|endoftext|>'",
    )
)
@_clean_errors
def train(
    input: Annotated[list[Path], typer.Option("--input", "-i", help="UTF-8 text file(s) to learn from.")],
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", "-v", help="Total ids: for bpe, 256 bytes + merges + special tokens.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the tokenizer into.")],
    kind: Annotated[str, typer.Option("--kind", "-k", help="Registered tokenizer (`alilama plugins`).")] = "bpe",
    special: Annotated[
        Optional[list[str]],
        typer.Option(
            "--special", "-s", help="Special token (repeatable); default <|endoftext|>. Also a document separator."
        ),
    ] = None,
    no_special: Annotated[bool, typer.Option("--no-special", help="No special tokens at all.")] = False,
    option: Annotated[
        Optional[list[str]], typer.Option("--option", help="The tokenizer's own setting, key=value (repeatable).")
    ] = None,
    threads: ThreadsOpt = None,
    errors: ErrorsOpt = "strict",
) -> None:
    """Learn a vocabulary from text files with any registered tokenizer (default: byte-level BPE)."""
    from alilama_core.contracts.tokenizer import END_OF_TEXT, MAX_VOCAB_SIZE
    from alilama_core.engine.registry import get_tokenizer
    from alilama_core.runs.outputs import check_writable_path
    from alilama_core.runs.tokenizers import save_tokenizer

    if no_special and special:
        raise TokenizerError("give either --special or --no-special, not both")
    specials = [] if no_special else (special or [END_OF_TEXT])
    if errors not in ("strict", "replace"):
        raise TokenizerError(f"--errors must be 'strict' or 'replace', not {errors!r}")
    if not 1 <= vocab_size <= MAX_VOCAB_SIZE:
        raise TokenizerError(f"--vocab-size must be between 1 and {MAX_VOCAB_SIZE:,}, got {vocab_size:,}")
    cls = get_tokenizer(kind)
    options = cls.check_options(parse_options(option))
    for p in input:
        if not p.is_file():
            raise TokenizerError(f"no such input file: {p}")
    check_writable_path(out, "tokenizer folder")  # before a long training, not after it
    if out.is_dir() and any(out.iterdir()):
        raise TokenizerError(f"{str(out)!r} already exists and is not empty; choose another --out")
    total_bytes = sum(p.stat().st_size for p in input)
    if total_bytes == 0:
        raise TokenizerError("the input files are empty: nothing to train on")
    t0 = time.perf_counter()
    with _progress() as bar:
        reading = bar.add_task("reading + counting", total=total_bytes)
        merging = bar.add_task("training", total=max(vocab_size - len(specials), 0), start=False)

        def read_progress(done: int, total: int) -> None:
            bar.update(reading, completed=done, total=total)

        def progress(done: int, total: int) -> None:
            bar.start_task(merging)
            bar.update(merging, completed=done, total=total)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tok = cls.train_files(
                input,
                vocab_size,
                errors=errors,
                read_progress=read_progress,
                special_tokens=specials,
                threads=threads,
                progress=progress,
                **options,
            )
    train_s = time.perf_counter() - t0
    save_tokenizer(tok, out, kind=kind)  # records the name it was trained as, which loads it back
    for w in caught:
        err_console.print(f"[yellow]warning:[/] {escape(str(w.message))}")
    n_tokens = sum(len(tok.encode_file(p, threads=threads, errors=errors)) for p in input)
    table = Table(title=f"tokenizer written to {out}", show_header=False)
    for key, value in tok.describe().items():
        if key != "pattern":
            table.add_row(key.replace("_", " "), escape(_show(value)))
    table.add_row("input", f"{total_bytes:,} bytes in {len(input)} file(s)")
    table.add_row("training time", f"{train_s:.2f} s ({total_bytes / 1e6 / max(train_s, 1e-9):.1f} MB/s)")
    table.add_row("compression", f"{n_tokens:,} tokens, {n_tokens / total_bytes:.4f} tokens/byte")
    console.print(table)


@tokenizer_app.command(
    "import",
    epilog=help_examples(
        "alilama tokenizer import gpt2 --out tok-gpt2/",
        "alilama tokenizer import cl100k_base --out tok-cl100k/",
        "alilama tokenizer import path/to/tokenizer.json --out tok/",
        "alilama tokenizer import my.tiktoken --pattern cl100k --out tok/",
    ),
)
@_clean_errors
def import_(
    source: Annotated[
        str,
        typer.Argument(
            help="A tiktoken ranks file (*.tiktoken), a byte-level BPE tokenizer.json (or its folder), a minbpe .model, or a known "
            "name: gpt2, r50k_base, p50k_base, cl100k_base, o200k_base (from files already on this machine)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the tokenizer into.")],
    pattern: Annotated[
        Optional[str],
        typer.Option(
            "--pattern",
            help="Split pattern of a ranks file that is not a known one: a regex or gpt2, cl100k, o200k, ...",
        ),
    ] = None,
    special: Annotated[
        Optional[list[str]],
        typer.Option("--special", "-s", help="TOKEN=ID special token of a ranks file that is not a known one."),
    ] = None,
    kind: Annotated[
        str, typer.Option("--kind", "-k", help="Registered tokenizer whose importer reads SOURCE (`alilama plugins`).")
    ] = "bpe",
) -> None:
    """Import a published byte-level BPE vocabulary (GPT-2, cl100k, o200k, Llama-3, ...) with its own ids."""
    from alilama_core.engine.registry import get_tokenizer_importer
    from alilama_core.runs.outputs import check_writable_path
    from alilama_core.runs.tokenizers import save_tokenizer

    importer = get_tokenizer_importer(kind)
    specials = None
    if special:
        specials = {}
        for item in special:
            token, sep, value = item.rpartition("=")
            if not sep or not token or not value.isdigit():
                raise TokenizerError(f"--special takes TOKEN=ID, got {item!r}")
            specials[token] = int(value)
    check_writable_path(out, "tokenizer folder")
    if out.is_dir() and any(out.iterdir()):
        raise TokenizerError(f"{str(out)!r} already exists and is not empty; choose another --out")
    t0 = time.perf_counter()
    tok, where = importer(source, pattern=pattern, special_tokens=specials)
    save_tokenizer(tok, out, kind=kind)
    table = Table(title=f"tokenizer written to {out}", show_header=False)
    table.add_row("from", escape(where))
    facts = tok.describe()
    for key, value in facts.items():
        if key != "pattern":
            table.add_row(key.replace("_", " "), escape(_show(value)))
    if "pattern" in facts:  # last: the longest row
        table.add_row("pattern", escape(_show(facts["pattern"])))
    table.add_row("import time", f"{time.perf_counter() - t0:.2f} s")
    console.print(table)
    notice = tok.fallback_notice()
    if notice:
        err_console.print(f"[yellow]notice:[/] {escape(notice)}")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


@tokenizer_app.command(
    epilog=help_examples(
        'alilama tokenizer encode --tokenizer tok/ "Once upon a time"',
        "alilama tokenizer encode --tokenizer tok/ --input story.txt --out ids.npy",
    )
)
@_clean_errors
def encode(
    tokenizer: TokenizerDir,
    text: Annotated[Optional[str], typer.Argument(help="Text to encode (or use --input).")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help="UTF-8 file to encode.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write ids to this .npy file.")] = None,
    threads: ThreadsOpt = None,
    errors: ErrorsOpt = "strict",
) -> None:
    """Encode text (special tokens in it are encoded as their ids); print ids or write .npy."""
    import numpy as np

    tok = load(tokenizer)
    if (text is None) == (input is None):
        raise TokenizerError("give either TEXT or --input FILE")
    if input is not None:
        ids = tok.encode_file(input, threads=threads, errors=errors)
    else:
        ids = np.asarray(tok.encode(text, allowed_special="all"), dtype=np.uint32)
    if out is not None:
        from alilama_core.base.files import atomic_open

        if not out.parent.is_dir():
            raise TokenizerError(f"cannot write {str(out)!r}: the folder {str(out.parent)!r} does not exist")
        with atomic_open(out, "wb") as f:
            np.save(f, ids)
        err_console.print(f"{len(ids):,} tokens written to {out}")
    else:
        console.print(" ".join(str(int(i)) for i in ids), highlight=False, soft_wrap=True)


@tokenizer_app.command(
    epilog=help_examples(
        "alilama tokenizer decode --tokenizer tok/ 425 436 258",
        "alilama tokenizer decode --tokenizer tok/ --input ids.npy",
    )
)
@_clean_errors
def decode(
    tokenizer: TokenizerDir,
    ids: Annotated[Optional[list[int]], typer.Argument(help="Token ids.")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help=".npy file or text file of ids.")] = None,
) -> None:
    """Decode ids back to text."""
    tok = load(tokenizer)
    if input is not None:
        ids = _read_ids(input)
    if not ids:
        raise TokenizerError("give token ids or --input FILE")
    bad = [i for i in ids if not 0 <= i < tok.vocab_size]
    if bad:
        raise TokenizerError(f"id {bad[0]} is outside the vocabulary (0..{tok.vocab_size - 1})")
    sys.stdout.write(tok.decode(ids))
    sys.stdout.write("\n")


def _read_ids(path: Path) -> list[int]:
    """Ids from a ``.npy`` array of integers or a text file of whitespace-separated integers."""
    import numpy as np

    try:
        if path.suffix == ".npy":
            arr = np.load(path, allow_pickle=False)
            if arr.ndim != 1 or arr.dtype.kind not in "iu":
                raise ValueError(f"expected a 1-D integer array, got {arr.ndim}-D {arr.dtype}")
            return arr.tolist()
        return [int(x) for x in path.read_text(encoding="utf-8").split()]
    except (OSError, ValueError, UnicodeDecodeError, EOFError) as e:
        raise TokenizerError(f"cannot read ids from {path}: {e}") from None


@tokenizer_app.command(
    epilog=help_examples("alilama tokenizer info --tokenizer tok/", "alilama tokenizer info --tokenizer tok/ --show 20")
)
@_clean_errors
def info(
    tokenizer: TokenizerDir,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    show: Annotated[int, typer.Option("--show", help="Show the last N tokens of the vocabulary.")] = 10,
) -> None:
    """Describe a saved tokenizer: its kind, vocabulary, special tokens and what its plugin reports."""
    tok = load(tokenizer)
    data = tok.describe()
    if json_out:
        console.print_json(json.dumps(data))
        return
    table = Table(title=str(tokenizer), show_header=False)
    for k, v in data.items():
        table.add_row(k, escape(_show(v)))
    specials = set(tok.special_tokens.values())
    last = []
    for i in range(tok.vocab_size - 1, -1, -1):
        if len(last) >= max(show, 0):
            break
        if i not in specials:
            try:  # an imported vocabulary may have gaps (cl100k_base has no id 100256)
                last.append((i, tok.decode_bytes([i]).decode("utf-8", errors="replace")))
            except TokenizerError:
                continue
    for i, piece in reversed(last):
        table.add_row(f"id {i}", escape(repr(piece)))
    console.print(table)
