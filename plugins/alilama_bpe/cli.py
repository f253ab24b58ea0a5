"""``alilama tokenizer``: train, encode, decode and inspect byte-level BPE tokenizers.

No torch here: the commands start fast.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from alilama_core.errors import AlilamaError

tokenizer_app = typer.Typer(
    no_args_is_help=True,
    help="Train, encode, decode and inspect byte-level BPE tokenizers.",
)

console = Console()
err_console = Console(stderr=True)

TokenizerDir = Annotated[
    Path, typer.Option("--tokenizer", "-t", help="Folder written by `tokenizer train` (or a .model file).")
]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", "-j", help="Threads (default: all cores).")]
ErrorsOpt = Annotated[
    str, typer.Option("--errors", help="On invalid UTF-8: 'strict' (stop with an error) or 'replace' (use U+FFFD).")
]


def _clean_errors(fn):
    """Print Alilama's errors as one line and exit 1, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AlilamaError as e:
            err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
            raise typer.Exit(1) from None

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


@tokenizer_app.command()
@_clean_errors
def train(
    input: Annotated[list[Path], typer.Option("--input", "-i", help="UTF-8 text file(s) to learn from.")],
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", "-v", help="Total ids: 256 bytes + merges + special tokens.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the tokenizer into.")],
    special: Annotated[
        Optional[list[str]],
        typer.Option(
            "--special", "-s", help="Special token (repeatable); default <|endoftext|>. Also a document separator."
        ),
    ] = None,
    no_special: Annotated[bool, typer.Option("--no-special", help="No special tokens at all.")] = False,
    threads: ThreadsOpt = None,
    errors: ErrorsOpt = "strict",
) -> None:
    """Learn a byte-level BPE vocabulary from text files."""
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core.errors import TokenizerError

    specials = [] if no_special else (special or ["<|endoftext|>"])
    if errors not in ("strict", "replace"):
        raise TokenizerError(f"--errors must be 'strict' or 'replace', not {errors!r}")
    for p in input:
        if not p.is_file():
            raise TokenizerError(f"no such input file: {p}")
    total_bytes = sum(p.stat().st_size for p in input)
    if total_bytes == 0:
        raise TokenizerError("the input files are empty: nothing to train on")
    t0 = time.perf_counter()
    with _progress() as bar:
        reading = bar.add_task("reading + counting", total=total_bytes)
        merging = bar.add_task("merging", total=max(vocab_size - 256 - len(specials), 0), start=False)

        def read_progress(done: int, total: int) -> None:
            bar.update(reading, completed=done, total=total)

        def progress(done: int, total: int) -> None:
            bar.start_task(merging)
            bar.update(merging, completed=done, total=total)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tok = BPETokenizer.train_files(
                input, vocab_size, errors=errors, read_progress=read_progress,
                special_tokens=specials, threads=threads, progress=progress,
            )
    train_s = time.perf_counter() - t0
    tok.save(out)
    for w in caught:
        err_console.print(f"[yellow]warning:[/] {escape(str(w.message))}")
    n_tokens = 0
    for p in input:
        n_tokens += len(tok.encode_file(p, threads=threads, errors=errors))
    table = Table(title=f"tokenizer written to {out}", show_header=False)
    table.add_row("merges", f"{len(tok.merges):,}" + (" (stopped early)" if tok.stopped_early else ""))
    table.add_row("vocab size", f"{tok.vocab_size:,}")
    table.add_row("special tokens", ", ".join(f"{t}={i}" for t, i in tok.special_tokens.items()) or "none")
    table.add_row("input", f"{total_bytes:,} bytes in {len(input)} file(s)")
    table.add_row("training time", f"{train_s:.2f} s ({total_bytes / 1e6 / max(train_s, 1e-9):.1f} MB/s)")
    table.add_row("compression", f"{n_tokens:,} tokens, {n_tokens / total_bytes:.4f} tokens/byte")
    table.add_row("implementation", tok.implementation)
    console.print(table)


@tokenizer_app.command()
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
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core.errors import TokenizerError

    tok = BPETokenizer.load(tokenizer)
    if (text is None) == (input is None):
        raise TokenizerError("give either TEXT or --input FILE")
    if input is not None:
        ids = tok.encode_file(input, threads=threads, errors=errors)
    else:
        import numpy as np

        ids = np.asarray(tok.encode(text, allowed_special="all"), dtype=np.uint32)
    if out is not None:
        import numpy as np

        np.save(out, ids)
        err_console.print(f"{len(ids):,} tokens written to {out}")
    else:
        console.print(" ".join(str(int(i)) for i in ids), highlight=False, soft_wrap=True)


@tokenizer_app.command()
@_clean_errors
def decode(
    tokenizer: TokenizerDir,
    ids: Annotated[Optional[list[int]], typer.Argument(help="Token ids.")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help=".npy file or text file of ids.")] = None,
) -> None:
    """Decode ids back to text."""
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core.errors import TokenizerError

    tok = BPETokenizer.load(tokenizer)
    if input is not None:
        if input.suffix == ".npy":
            import numpy as np

            ids = np.load(input).tolist()
        else:
            try:
                ids = [int(x) for x in input.read_text().split()]
            except (OSError, ValueError) as e:
                raise TokenizerError(f"cannot read ids from {input}: {e}") from None
    if not ids:
        raise TokenizerError("give token ids or --input FILE")
    sys.stdout.write(tok.decode(ids))
    sys.stdout.write("\n")


@tokenizer_app.command()
@_clean_errors
def info(
    tokenizer: TokenizerDir,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    show: Annotated[int, typer.Option("--show", help="Show the last N merges.")] = 10,
) -> None:
    """Describe a saved tokenizer."""
    from alilama_bpe import formats
    from alilama_bpe.tokenizer import BPETokenizer

    tok = BPETokenizer.load(tokenizer)
    data = {
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merges),
        "special_tokens": tok.special_tokens,
        "pattern": tok.pattern,
        "implementation": tok.implementation,
    }
    if json_out:
        console.print_json(json.dumps(data))
        return
    table = Table(title=str(tokenizer), show_header=False)
    for k, v in data.items():
        table.add_row(k, escape(str(v)))
    vocab = tok.vocab
    for k in range(max(0, len(tok.merges) - show), len(tok.merges)):
        i = 256 + k
        table.add_row(f"id {i}", escape(repr(formats.render_token(vocab[i]))))
    console.print(table)
