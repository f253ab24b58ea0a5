"""CLI commands of the training pipeline: data, train, eval, plot, quickstart."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from alilama_core.app.common import (
    ConfigOpt,
    ForceAttentionOpt,
    JsonOpt,
    LogOpt,
    OverridesArg,
    OverwriteOpt,
    PresetOpt,
    ProgressOpt,
    StepProgress,
    console,
    err_console,
    examples,
    help_examples,
    log_eval_results,
    loud_warnings,
    plain_line,
    resolve_config,
    show_bar,
    warn_replacements,
)
from alilama_core.app.run_options import (
    DeviceOpt,
    NoVerifyOpt,
    ThreadsOpt,
    choose_device,
    describe_loaded,
    set_threads,
)
from alilama_core.base.errors import AlilamaError

data_app = typer.Typer(
    help="Prepare and download training data.",
    no_args_is_help=True,
    epilog=help_examples(
        "alilama data download tinystories",
        "alilama data prepare --input corpus.txt --tokenizer tok/ --out data/",
    ),
)


@data_app.command(
    "prepare",
    epilog=help_examples(
        "alilama data prepare --input corpus.txt --tokenizer tok/ --out data/",
        "alilama data prepare -i books/ -i notes.jsonl --tokenizer tok/ -o data/",
        "alilama data prepare -i corpus.txt --tokenizer tok/ -o data/ --no-progress",
        "alilama data prepare -i train.txt --val-input valid.txt --tokenizer t/ -o d/",
    ),
)
def data_prepare(
    input: Annotated[
        list[str], typer.Option("--input", "-i", help="Text/JSONL file, folder, or hf:NAME (repeatable).")
    ],
    tokenizer: Annotated[str, typer.Option("--tokenizer", help="Tokenizer folder (from `alilama tokenizer train`).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output data folder.")],
    val_fraction: Annotated[
        Optional[float],
        typer.Option(
            "--val-fraction", help="Share of documents drawn for validation [default: 0.05].", show_default=False
        ),
    ] = None,
    val_input: Annotated[
        Optional[list[str]],
        typer.Option("--val-input", help="Validation documents (repeatable), instead of drawing them from --input."),
    ] = None,
    field: Annotated[str, typer.Option("--field", help="JSONL / dataset field holding the text.")] = "text",
    separator: Annotated[str, typer.Option("--separator", help="Line that separates documents.")] = "<|endoftext|>",
    errors: Annotated[str, typer.Option("--errors", help="strict, or replace invalid UTF-8 with U+FFFD.")] = "strict",
    threads: Annotated[
        Optional[int], typer.Option("--threads", help="Encoding threads (default: one per CPU this process may use).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the train/val assignment.")] = 0,
    overwrite: OverwriteOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Encode documents into memory-mapped train/val token files plus meta.json."""
    from alilama_core.app.prepare import prepare

    total = sum(Path(p).stat().st_size for p in [*input, *(val_input or [])] if Path(p).is_file()) or None
    with EncodeProgress(input, total, progress) as report:
        meta = prepare(
            input,
            tokenizer,
            out,
            val_fraction=val_fraction,
            field=field,
            separator=separator,
            errors=errors,
            seed=seed,
            threads=threads,
            overwrite=overwrite,
            progress=report.update,
            val_inputs=val_input or (),
        )
        report.finish(meta)
    for name, s in meta["splits"].items():
        console.print(
            f"{name}: {s['documents']:,} documents, {s['tokens']:,} tokens, {s['bytes']:,} bytes "
            f"({s['tokens'] / max(1, s['bytes']):.3f} tokens/byte)",
            highlight=False,
        )
    if meta.get("split") == "position":
        console.print(
            f"split by position: the input holds too few documents to split by document, so the last "
            f"{meta['val_fraction']:.0%} of its tokens went to validation",
            highlight=False,
        )
    console.print(f"wrote {out} ({meta['dtype']})", highlight=False)


ENCODE_LINE_EVERY_S = 5.0
"""Outside a terminal, ``data prepare`` prints a progress line at most this often."""


class EncodeProgress:
    """``data prepare``'s progress on stderr: in a terminal, a rich bar of the input's bytes; else plain lines.

    The plain lines: one when encoding starts, one at most every ``every_s`` seconds with the documents,
    bytes and tokens done so far (``update`` is called after each batch), and one at the end (``finish``).
    """

    def __init__(
        self, inputs: list[str], total_bytes: int | None, bar: bool = True, every_s: float = ENCODE_LINE_EVERY_S
    ) -> None:
        self.inputs, self.total, self.every_s = inputs, total_bytes, every_s
        self.started = self.last_line = time.monotonic()
        self._bar = self._task = None
        if show_bar(bar):
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self._bar = Progress(
                TextColumn("encode"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err_console
            )

    def __enter__(self) -> EncodeProgress:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("encode", total=self.total)
        else:
            size = f" ({self.total:,} bytes)" if self.total else ""
            plain_line(f"encode: reading {', '.join(self.inputs)}{size}")
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, done) -> None:
        """``done``: the documents, bytes and tokens encoded so far (a ``SplitStats`` of both splits)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done.bytes)
            return
        if time.monotonic() - self.last_line < self.every_s:
            return
        self.last_line = time.monotonic()
        share = f" ({min(1.0, done.bytes / self.total):.0%} of the input)" if self.total else ""
        plain_line(
            f"encode: {done.documents:,} documents, {done.bytes:,} bytes, {done.tokens:,} tokens{share}, "
            f"{self._elapsed():.0f} s"
        )

    def finish(self, meta: dict) -> None:
        """The last plain line: what was encoded, from the meta dict ``prepare`` returns (the bar: full)."""
        if self._bar is not None:
            if self.total:  # counted in the text's bytes, not the files' (separators, JSON): all read now
                self._bar.update(self._task, completed=self.total)
            return
        splits = meta["splits"].values()
        documents, size, tokens = (sum(s[key] for s in splits) for key in ("documents", "bytes", "tokens"))
        plain_line(f"encoded {documents:,} documents, {size:,} bytes, {tokens:,} tokens in {self._elapsed():.1f} s")


@data_app.command(
    "download",
    epilog=help_examples("alilama data download tinystories", "alilama data download tinystories --split valid"),
)
def data_download(
    name: Annotated[str, typer.Argument(help="Dataset: tinystories.")],
    split: Annotated[str, typer.Option("--split", help="train, valid, or all.")] = "all",
    revision: Annotated[
        Optional[str], typer.Option("--revision", help="The dataset revision (a commit or tag) to fetch.")
    ] = None,
) -> None:
    """Fetch a dataset's files from the Hugging Face Hub into its local cache; print their paths."""
    for path in download(name, split, revision):
        console.print(path, highlight=False)


def download(name: str, split: str = "all", revision: str | None = None) -> list[str]:
    """The library's ``alilama_core.runs.datasets.download``."""
    from alilama_core.runs.datasets import download as fetch

    return fetch(name, split, revision)


@examples(
    "alilama train --config configs/essay.yaml --data data/ --out runs/essay",
    "alilama train --data data/ --out runs/rope model.positional=rope",
    "alilama train --resume runs/essay train.max_steps=4000",
    "alilama train --task sort --out runs/sort task.lengths=1-8",
    # unknown options are overrides too: `--model.n_layers=4` means model.n_layers=4
    context_settings={"ignore_unknown_options": True},
)
def train_cmd(
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    overrides: OverridesArg = None,
    data: Annotated[Optional[str], typer.Option("--data", "-d", help="Prepared data folder.")] = None,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="New run folder.")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Run folder to continue.")] = None,
    overwrite: OverwriteOpt = False,
    stop_at: Annotated[Optional[int], typer.Option("--stop-at", help="Checkpoint and stop after this step.")] = None,
    progress: ProgressOpt = True,
    task: Annotated[
        Optional[str],
        typer.Option("--task", help="Train on a generated task (`alilama tasks list`) instead of --data."),
    ] = None,
    threads: Annotated[
        Optional[int],
        typer.Option("--threads", help="CPU threads per process (train.threads; default: one per physical core)."),
    ] = None,
) -> None:
    """Train a model (one process, or DDP under torchrun) into a run folder."""
    import os

    from alilama_core.engine.registry import get_trainer

    if threads is not None:
        overrides = [*(overrides or []), f"train.threads={threads}"]

    given_data = data
    if resume:
        from alilama_core.runs.checkpoint import resume_config

        run = Path(resume)
        if not (run / "config.yaml").is_file():
            raise AlilamaError(f"cannot resume: {resume!r} is not a run folder (no config.yaml)")
        if config or preset:
            raise AlilamaError("--resume uses the run's own config; give overrides only (e.g. train.max_steps=4000)")
        if out and Path(out).resolve() != run.resolve():
            raise AlilamaError("give either --out (a new run) or --resume (continue a run), not both")
        cfg, recorded = resume_config(run, overrides)
        data = data if data is not None else recorded
    else:
        if not out:
            raise AlilamaError("give --out RUN for a new run (or --resume RUN to continue one)")
        run = Path(out)
        cfg = resolve_config(config, preset, overrides)
    if task or cfg.task.name:  # generated examples: no prepared data
        from alilama_core.app.tasks import task_config

        if given_data is not None:
            raise AlilamaError(
                f"--data {given_data!r} and --task {task or cfg.task.name!r} exclude each other: a task run trains "
                "on generated examples, never on prepared data. Drop --data, or drop --task (and task.name) "
                "to train on the data"
            )
        cfg, data = task_config(cfg, task, bool(resume), overrides), ""
    elif not data:
        raise AlilamaError("give --data DIR (a folder written by `alilama data prepare`), or --task NAME")
    else:
        from alilama_core.runs.data import TokenData

        vocab = TokenData(data).meta["vocab_size"]
        if not resume and cfg.model.vocab_size != vocab:
            console.print(f"model.vocab_size set to the tokenizer's {vocab}", highlight=False)
            cfg.model.vocab_size = vocab
    warn_replacements()  # a built-in taken over by a plugin is said before training starts

    def echo(text="", **kw) -> None:  # whole lines, never wrapped at the console's width (logs, pipes)
        console.print(text, soft_wrap=True, highlight=False, **kw)

    trainer = get_trainer(cfg.train.trainer)(cfg, echo=echo, show_progress=progress)
    with loud_warnings():  # a logger that failed (train.loggers) is said as a warning
        result = trainer.fit(data, str(run), resume=bool(resume), overwrite=overwrite, stop_at=stop_at)
    if result.get("interrupted"):
        raise typer.Exit(130)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun: rank 0 reports
        return
    from alilama_core.runs.checkpoint import FINAL, WEIGHTS

    if not (run / FINAL / WEIGHTS).is_file():  # a finished run has its final weights, whoever trained it
        raise AlilamaError(
            f"trainer {cfg.train.trainer!r} returned at step {result.get('step')} without writing "
            f"{run / FINAL / WEIGHTS}, so the run is not finished. The trainer must end fit() with its "
            "RunWriter's finish(model, state) (alilama_core.contracts.runs); alilama_core.kit.check_trainer "
            "checks this"
        )
    if result.get("finished"):
        return
    summary = f"done: step {result['step']}"
    if result.get("val_bpb") is not None:
        summary += f", val loss {result['val_loss']:.4f}, val bpb {result['val_bpb']:.4f}"
    console.print(f"{summary}; run folder {run}", highlight=False)


def check_eval_choice(
    data: list[str] | None, task: str | None, lengths: str | None, context_lengths: str | None
) -> None:
    """Refuse an empty ``--lengths``/``--context-lengths`` and options of a task run mixed with a text run's."""
    for option, value, default in (
        ("--lengths", lengths, "8,16,32 (leave it out for the longest trained length, twice and four times it)"),
        ("--context-lengths", context_lengths, "128,256 (leave it out for 1x, 2x, 4x and 8x the trained context)"),
    ):
        if value is not None and not value.strip():
            raise AlilamaError(f"{option} is empty: give the lengths to score at, e.g. {option} {default}")
    task_options = [o for o, v in (("--task", task), ("--lengths", lengths)) if v is not None]
    if data and task_options:
        raise AlilamaError(
            f"--data scores a run trained on text, {' and '.join(task_options)} a run trained on a task: a run is "
            f"one or the other. Drop --data to score the task run on its generated test sets, or drop "
            f"{' and '.join(task_options)} to score a text run on {data[0]!r}"
        )
    if context_lengths is not None and task_options:
        raise AlilamaError(
            "--context-lengths is for a text run (with --data); a task run is scored at task lengths: "
            "give --lengths instead"
        )


@examples(
    "alilama eval runs/essay --data valid.txt --context-lengths 128,256,512",
    "alilama eval runs/essay --data valid.txt --json > essay.json",
    "alilama eval runs/sort --lengths 8,16,32",
)
def eval_cmd(
    run: Annotated[str, typer.Argument(help="Run folder.")],
    data: Annotated[Optional[list[str]], typer.Option("--data", help="Raw text file (repeatable).")] = None,
    context_lengths: Annotated[
        Optional[str], typer.Option("--context-lengths", help="e.g. 128,256,512,1024 (default 1x,2x,4x,8x).")
    ] = None,
    attention: Annotated[
        str,
        typer.Option(
            "--attention",
            help="Backend for evaluation (auto: the fastest exact one, or the run's own when it was "
            "trained with non-exact attention).",
        ),
    ] = "auto",
    force_attention: ForceAttentionOpt = False,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Tokens per file (0: all).")] = 262_144,
    no_verify: NoVerifyOpt = False,
    as_json: JsonOpt = False,
    task: Annotated[Optional[str], typer.Option("--task", help="Task run: the task it was trained on.")] = None,
    lengths: Annotated[
        Optional[str], typer.Option("--lengths", help="Task run: lengths to test, e.g. 8,16,32,64.")
    ] = None,
    examples: Annotated[int, typer.Option("--examples", help="Task run: test examples per length.")] = 256,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Task run: test-set seed (default task.seed).")] = None,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    progress: ProgressOpt = True,
    log: LogOpt = False,
) -> None:
    """Loss and bits per byte on raw text at the trained context and longer ones; for a task run,
    exact match and per-token accuracy at each length."""
    if seed is not None and seed < 0:
        raise AlilamaError(f"--seed must be an integer >= 0, got {seed}")
    check_eval_choice(data, task, lengths, context_lengths)
    n_threads = set_threads(threads)
    where = choose_device(device)
    if task is not None or lengths is not None or not data:  # a run trained on an algorithmic task
        from alilama_core.app.tasks import task_eval

        if device.strip().lower() == "cuda":
            raise AlilamaError("--device cuda is not supported for task runs yet; they are scored on cpu")

        def on_task_run_loaded(loaded) -> None:
            plain_line(describe_loaded(loaded, "cpu", n_threads, ("short",)))

        return task_eval(
            run,
            task,
            lengths,
            examples,
            seed,
            attention,
            as_json,
            force_attention,
            not no_verify,
            on_loaded=on_task_run_loaded,
            log=log,
        )
    from dataclasses import asdict

    from rich.table import Table

    from alilama_core.runs.evaluate import evaluate_run

    lengths = None
    if context_lengths:
        from alilama_core.contracts.task import parse_int_list

        lengths = parse_int_list(context_lengths, "--context-lengths", "128,256")
    if max_tokens < 0:
        raise AlilamaError(f"--max-tokens must be >= 0 (0: all), got {max_tokens}")
    for file in data:
        if not Path(file).is_file():
            raise AlilamaError(f"eval file {file!r} does not exist")
    if (Path(run) / "config.yaml").is_file():
        from alilama_core.engine import configs as cfgmod

        trained_on = cfgmod.load(Path(run) / "config.yaml").task.name
        if trained_on:
            raise AlilamaError(
                f"{run!r} was trained on task {trained_on!r}, not on text, so --data cannot score it; drop --data "
                f"to score it on the task's test sets (e.g. alilama eval {run} --lengths 8,16,32)"
            )
    from contextlib import ExitStack

    with ExitStack() as stack:
        steps: StepProgress | None = None
        evaluated = []  # the checkpoint folder scored

        def on_loaded(loaded, eval_lengths) -> None:
            nonlocal steps
            evaluated.append(loaded.checkpoint)
            shapes = ("short", "long") if max(eval_lengths) >= 1024 else ("short",)
            plain_line(describe_loaded(loaded, where, n_threads, shapes))
            steps = stack.enter_context(StepProgress("eval", len(data) * len(eval_lengths), progress))

        def on_step(done: int, total: int, file: str, length: int) -> None:
            steps.show(done + 1, f"{Path(file).name} at context {length:,}")

        with loud_warnings():
            rows = evaluate_run(
                run,
                data,
                lengths,
                attention=attention,
                max_tokens=max_tokens or None,
                verify=not no_verify,
                force_attention=force_attention,
                device=where,
                on_loaded=on_loaded,
                on_step=on_step,
            )
    if log:
        results = {}
        for r in rows:
            if r.loss is not None:
                where_ = f"eval/{Path(r.file).stem}/ctx{r.context_length}"
                results.update({f"{where_}/loss": r.loss, f"{where_}/bpb": r.bpb})
        log_eval_results(run, evaluated[0], results)
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    table = Table(title=f"eval of {run}")
    for col in ("file", "context", "loss", "bits/byte", "tokens", "attention"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            Path(r.file).name,
            str(r.context_length),
            f"{r.loss:.4f}" if r.loss is not None else "n/a",
            f"{r.bpb:.4f}" if r.bpb is not None else r.note,
            f"{r.tokens:,}",
            r.attention,
        )
    console.print(table)


@examples(
    "alilama plot runs/essay runs/essay-rope",
    "alilama plot runs/sort runs/sort-alibi --accuracy",
    "alilama plot alibi.json rope.json --out bpb.png",
)
def plot_cmd(
    runs: Annotated[list[str], typer.Argument(help="Run folder(s), or `alilama eval --json` output files (*.json).")],
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="PNG path (default RUN/loss.png).")] = None,
    accuracy: Annotated[
        bool, typer.Option("--accuracy", help="Task runs: exact match against length (from `alilama eval`).")
    ] = False,
) -> None:
    """Write loss.png: train and val loss against tokens, one colour per run (--accuracy: accuracy.png).

    Given `alilama eval --json` output files instead, write bpb.png: bits per byte against context length.
    """
    if any(r.endswith(".json") for r in runs):
        from alilama_core.app.plot import plot_eval

        if not all(r.endswith(".json") for r in runs):
            raise AlilamaError("give either run folders or `alilama eval --json` files (*.json), not both")
        path = plot_eval(runs, out or str(Path(runs[0]).with_name("bpb.png")))
        console.print(f"wrote {path}", highlight=False)
        return
    if accuracy:
        from alilama_core.app.tasks import plot_accuracy

        path = plot_accuracy(runs, out or str(Path(runs[0]) / "accuracy.png"))
        console.print(f"wrote {path}", highlight=False)
        return
    from alilama_core.app.plot import plot_runs

    with loud_warnings():  # metrics rows left out are said
        path = plot_runs(runs, out or str(Path(runs[0]) / "loss.png"))
    console.print(f"wrote {path}", highlight=False)


@examples("alilama quickstart", "alilama quickstart --out runs/quickstart --minutes 1 --threads 2")
def quickstart_cmd(
    out: Annotated[
        str, typer.Option("--out", "-o", help="Folder for corpus, tokenizer, data and run.")
    ] = "runs/quickstart",
    data: Annotated[
        Optional[str], typer.Option("--data", help="Train on this text file instead of the built-in stories.")
    ] = None,
    steps: Annotated[
        Optional[int], typer.Option("--steps", help="Training steps (default: fits the time budget).")
    ] = None,
    minutes: Annotated[
        float,
        typer.Option("--minutes", help="Time for the whole quickstart; training gets 1/1.15 of it (train.max_time)."),
    ] = 3.5,
    stories: Annotated[int, typer.Option("--stories", help="Built-in stories to generate.")] = 20000,
    overwrite: Annotated[
        bool, typer.Option("--overwrite/--no-overwrite", help="Replace the quickstart folder an earlier run wrote.")
    ] = True,
    threads: Annotated[
        Optional[int],
        typer.Option(
            "--threads",
            help="CPU threads for encoding and training (default: the physical cores other work leaves free).",
        ),
    ] = None,
) -> None:
    """Train a tokenizer and a small ALiBi model, offline, then generate text."""
    from alilama_core.app.quickstart import run_quickstart

    run_quickstart(
        out,
        data=data,
        steps=steps,
        minutes=minutes,
        stories=stories,
        overwrite=overwrite,
        echo=console.print,
        threads=threads,
    )
