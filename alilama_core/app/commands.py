"""CLI commands of the training pipeline: data, train, eval, plot, quickstart."""

from __future__ import annotations

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
    console,
    examples,
    help_examples,
    loud_warnings,
    plain_line,
    warn_replacements,
)
from alilama_core.app.run_options import (
    BuildDecodeOpt,
    DeviceOpt,
    NoVerifyOpt,
    ThreadsOpt,
    build_decode_step,
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
    from alilama_core.app.encode_progress import EncodeProgress
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
    from alilama_core.runs.datasets import download

    for path in download(name, split, revision):
        console.print(path, highlight=False)


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
    build_decode: BuildDecodeOpt = True,
) -> None:
    """Train a model (one process, or DDP under torchrun) into a run folder."""
    import os

    from alilama_core.app.training import report_finished, training_plan
    from alilama_core.engine.registry import get_trainer

    if threads is not None:
        overrides = [*(overrides or []), f"train.threads={threads}"]
    cfg, run, data = training_plan(config, preset, overrides, data=data, out=out, resume=resume, task=task)
    warn_replacements()  # a built-in taken over by a plugin is said before training starts

    def echo(text="", **kw) -> None:  # whole lines, never wrapped at the console's width (logs, pipes)
        console.print(text, soft_wrap=True, highlight=False, **kw)

    trainer = get_trainer(cfg.train.trainer)(cfg, echo=echo, show_progress=progress)
    with loud_warnings():  # a logger that failed (train.loggers) is said as a warning
        result = trainer.fit(data, str(run), resume=bool(resume), overwrite=overwrite, stop_at=stop_at)
    if result.get("interrupted"):
        raise typer.Exit(130)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun: rank 0 reports
        report_finished(run, cfg, result)
        if build_decode and stop_at is None:  # a finished run: generate, chat and serve decode on its step
            build_decode_step(run)


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
    from alilama_core.app.evaluation import check_eval_choice, text_eval

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
    text_eval(
        run,
        data,
        context_lengths,
        attention=attention,
        force_attention=force_attention,
        max_tokens=max_tokens,
        verify=not no_verify,
        as_json=as_json,
        device=where,
        threads=n_threads,
        progress=progress,
        log=log,
    )


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
    build_decode: BuildDecodeOpt = True,
) -> None:
    """Train a tokenizer and a small ALiBi model, offline, then generate text."""
    from alilama_core.app.quickstart import run_quickstart

    run_quickstart(
        out,
        build_decode=build_decode,
        data=data,
        steps=steps,
        minutes=minutes,
        stories=stories,
        overwrite=overwrite,
        echo=console.print,
        threads=threads,
    )
