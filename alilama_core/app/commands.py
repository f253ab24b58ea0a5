"""CLI commands of the training pipeline: data, train, eval, plot, quickstart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from alilama_core.app.common import (
    ConfigOpt,
    JsonOpt,
    OverridesArg,
    PresetOpt,
    console,
    resolve_config,
)
from alilama_core.errors import AlilamaError
from alilama_core.files import atomic_write_text

data_app = typer.Typer(help="Prepare and download training data.", no_args_is_help=True)

TINYSTORIES = {
    "repo_id": "roneneldan/TinyStories",
    "files": {"train": "TinyStoriesV2-GPT4-train.txt", "valid": "TinyStoriesV2-GPT4-valid.txt"},
}


@data_app.command("prepare")
def data_prepare(
    input: Annotated[list[str], typer.Option("--input", "-i", help="Text/JSONL file, folder, or hf:NAME (repeatable).")],
    tokenizer: Annotated[str, typer.Option("--tokenizer", help="Tokenizer folder (from `alilama tokenizer train`).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output data folder.")],
    val_fraction: Annotated[float, typer.Option("--val-fraction", help="Share of documents for validation.")] = 0.05,
    field: Annotated[str, typer.Option("--field", help="JSONL / dataset field holding the text.")] = "text",
    separator: Annotated[str, typer.Option("--separator", help="Line that separates documents.")] = "<|endoftext|>",
    errors: Annotated[str, typer.Option("--errors", help="strict, or replace invalid UTF-8 with U+FFFD.")] = "strict",
    threads: Annotated[Optional[int], typer.Option("--threads")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the train/val assignment.")] = 0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output folder.")] = False,
) -> None:
    """Encode documents into memory-mapped train/val token files plus meta.json."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TransferSpeedColumn,
    )

    from alilama_core.app.prepare import prepare

    total = sum(Path(p).stat().st_size for p in input if Path(p).is_file()) or None
    with Progress(TextColumn("encode"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=console) as bar:
        task = bar.add_task("encode", total=total)
        meta = prepare(
            input, tokenizer, out, val_fraction=val_fraction, field=field, separator=separator,
            errors=errors, seed=seed, threads=threads, overwrite=overwrite,
            progress=lambda n: bar.advance(task, n),
        )
    for name, s in meta["splits"].items():
        console.print(
            f"{name}: {s['documents']:,} documents, {s['tokens']:,} tokens, {s['bytes']:,} bytes "
            f"({s['tokens'] / max(1, s['bytes']):.3f} tokens/byte)", highlight=False,
        )
    console.print(f"wrote {out} ({meta['dtype']})", highlight=False)


@data_app.command("download")
def data_download(
    name: Annotated[str, typer.Argument(help="Dataset: tinystories.")],
    split: Annotated[str, typer.Option("--split", help="train, valid, or all.")] = "all",
    revision: Annotated[Optional[str], typer.Option("--revision")] = None,
) -> None:
    """Fetch a dataset's files from the Hugging Face Hub into its local cache; print their paths."""
    for path in download(name, split, revision):
        console.print(path, highlight=False)


def download(name: str, split: str = "all", revision: str | None = None) -> list[str]:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if name.lower() != "tinystories":
        raise AlilamaError(f"unknown dataset {name!r}; available: tinystories")
    files = TINYSTORIES["files"]
    if split != "all" and split not in files:
        raise AlilamaError(f"unknown split {split!r}; available: {', '.join(files)}, all")
    wanted = list(files.values()) if split == "all" else [files[split]]
    paths = []
    for filename in wanted:
        try:
            paths.append(
                hf_hub_download(TINYSTORIES["repo_id"], filename, repo_type="dataset", revision=revision)
            )
        except LocalEntryNotFoundError as exc:
            raise AlilamaError(
                f"{filename} is not in the local Hugging Face cache and the Hub cannot be reached "
                f"(offline, or HF_HUB_OFFLINE=1): {exc}"
            ) from None
    return paths


def train_cmd(
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    overrides: OverridesArg = None,
    data: Annotated[Optional[str], typer.Option("--data", "-d", help="Prepared data folder.")] = None,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="New run folder.")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Run folder to continue.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing run in --out.")] = False,
    stop_at: Annotated[Optional[int], typer.Option("--stop-at", help="Checkpoint and stop after this step.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Train a model (one process, or DDP under torchrun) into a run folder."""
    from alilama_core import config as cfgmod
    from alilama_core.registry import get_trainer

    if resume:
        run = Path(resume)
        if not (run / "config.yaml").is_file():
            raise AlilamaError(f"cannot resume: {resume!r} is not a run folder (no config.yaml)")
        if config or preset:
            raise AlilamaError("--resume uses the run's own config; give overrides only (e.g. train.max_steps=4000)")
        cfg = cfgmod.apply_overrides(cfgmod.load(run / "config.yaml"), overrides).validate()
        if data is None:
            data = json.loads((run / "run.json").read_text())["data"] if (run / "run.json").is_file() else None
    else:
        if not out:
            raise AlilamaError("give --out RUN for a new run (or --resume RUN to continue one)")
        run = Path(out)
        cfg = resolve_config(config, preset, overrides)
    if not data:
        raise AlilamaError("give --data DIR (a folder written by `alilama data prepare`)")
    from alilama_core.data import TokenData

    vocab = TokenData(data).meta["vocab_size"]
    if not resume and cfg.model.vocab_size != vocab:
        console.print(f"model.vocab_size set to the tokenizer's {vocab}", highlight=False)
        cfg.model.vocab_size = vocab
    trainer = get_trainer(cfg.train.trainer)(cfg, echo=console.print, show_progress=progress)
    result = trainer.fit(data, str(run), resume=bool(resume), overwrite=overwrite, stop_at=stop_at)
    if (run / "config.yaml").is_file():
        atomic_write_text(run / "run.json", json.dumps({"data": str(Path(data).resolve())}) + "\n")
    if result.get("interrupted"):
        raise typer.Exit(130)
    summary = f"done: step {result['step']}"
    if result.get("val_bpb") is not None:
        summary += f", val loss {result['val_loss']:.4f}, val bpb {result['val_bpb']:.4f}"
    console.print(f"{summary}; run folder {run}", highlight=False)


def eval_cmd(
    run: Annotated[str, typer.Argument(help="Run folder.")],
    data: Annotated[list[str], typer.Option("--data", help="Raw text file (repeatable).")],
    context_lengths: Annotated[Optional[str], typer.Option("--context-lengths", help="e.g. 128,256,512,1024 (default 1x,2x,4x,8x).")] = None,
    attention: Annotated[str, typer.Option("--attention", help="Backend for evaluation.")] = "auto",
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Tokens per file (0: all).")] = 262_144,
    as_json: JsonOpt = False,
) -> None:
    """Loss and bits per byte on raw text at the trained context and longer ones."""
    from dataclasses import asdict

    from rich.table import Table

    from alilama_core.evaluate import evaluate_run

    lengths = None
    if context_lengths:
        try:
            lengths = [int(x) for x in context_lengths.split(",") if x.strip()]
        except ValueError:
            raise AlilamaError(f"--context-lengths must be comma-separated integers, got {context_lengths!r}") from None
    rows = evaluate_run(run, data, lengths, attention=attention, max_tokens=max_tokens or None)
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    table = Table(title=f"eval of {run}")
    for col in ("file", "context", "loss", "bits/byte", "tokens", "attention"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            Path(r.file).name, str(r.context_length),
            f"{r.loss:.4f}" if r.loss is not None else "n/a", f"{r.bpb:.4f}" if r.bpb is not None else r.note,
            f"{r.tokens:,}", r.attention,
        )
    console.print(table)


def plot_cmd(
    runs: Annotated[list[str], typer.Argument(help="Run folder(s).")],
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="PNG path (default RUN/loss.png).")] = None,
) -> None:
    """Write loss.png: train and val loss against tokens, one colour per run."""
    from alilama_core.app.plot import plot_runs

    path = plot_runs(runs, out or str(Path(runs[0]) / "loss.png"))
    console.print(f"wrote {path}", highlight=False)


def quickstart_cmd(
    out: Annotated[str, typer.Option("--out", "-o", help="Folder for corpus, tokenizer, data and run.")] = "runs/quickstart",
    data: Annotated[Optional[str], typer.Option("--data", help="Train on this text file instead of the built-in stories.")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Training steps (default: fits the time budget).")] = None,
    minutes: Annotated[float, typer.Option("--minutes", help="Training time budget.")] = 3.5,
    stories: Annotated[int, typer.Option("--stories", help="Built-in stories to generate.")] = 20000,
    overwrite: Annotated[bool, typer.Option("--overwrite/--no-overwrite")] = True,
) -> None:
    """Train a tokenizer and a small ALiBi model, offline, then generate text."""
    from alilama_core.app.quickstart import run_quickstart

    run_quickstart(out, data=data, steps=steps, minutes=minutes, stories=stories, overwrite=overwrite, echo=console.print)


def register(app: typer.Typer) -> None:
    """Add the pipeline's commands to the root app."""
    app.add_typer(data_app, name="data")
    app.command("train")(train_cmd)
    app.command("eval")(eval_cmd)
    app.command("plot")(plot_cmd)
    app.command("quickstart")(quickstart_cmd)
