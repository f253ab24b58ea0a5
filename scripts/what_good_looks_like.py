"""Measure "what good looks like" on real TinyStories and write it into the docs.

Trains the quickstart's BPE tokenizer on ``../shared/data/tinystories/train.txt``,
then two runs at once, each on one CPU thread, through the real CLI
(``alilama train ... --no-progress``):

- ``quickstart``: the quickstart's model and settings under its time budget;
- ``long``: the essay preset (``--preset essay``) under ``--long-minutes``.

Each run is scored on ``valid.txt`` at context 128 (bits per byte and loss),
sampled for fixed prompts and seeds, and drawn on one loss-curve figure. Every
number goes to ``docs/figures/good_run.json``; the Markdown between
``<!-- good-run:begin -->`` and ``<!-- good-run:end -->`` in README.md and
docs/training.md is rendered from that JSON alone (``render``), never typed in.

    .venv/bin/python scripts/what_good_looks_like.py [--long-minutes 30] [--quick-minutes M]
        [--retrain] [--work build/good-run] [--docs-root .] [--report-only]

The runs, tokenizer and data are kept in ``--work`` and reused unless
``--retrain`` (or a run's budget changed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "tinystories"
WORK = REPO / "build" / "good-run"
SCRIPT = "scripts/what_good_looks_like.py"

BEGIN, END = "<!-- good-run:begin -->", "<!-- good-run:end -->"
JSON_NAME, IMAGE_NAME = "good_run.json", "good_loss.png"
DOCS = {"readme": "README.md", "training": "docs/training.md"}  # target -> page, under --docs-root
IMAGE = {"readme": "docs/figures/" + IMAGE_NAME, "training": "figures/" + IMAGE_NAME}  # relative to each page

RUNS = ("quickstart", "long")
EVAL_CONTEXT = 128
SAMPLING = {"max_new_tokens": 60, "temperature": 0.8, "top_k": 40}
VAL_FRACTION = 0.05  # of train.txt's stories held out by prepare, as the quickstart does: the curves' val line


# -- settings ------------------------------------------------------------------------------


def quickstart_minutes() -> float:
    """The quickstart's default ``minutes`` (``alilama quickstart``), from its signature."""
    from alilama_core.app.quickstart import run_quickstart

    return inspect.signature(run_quickstart).parameters["minutes"].default


def quickstart_budget_minutes() -> float:
    """The quickstart's training time budget (``train.max_time``), in minutes."""
    from alilama_core.app.quickstart import training_seconds

    return training_seconds(quickstart_minutes()) / 60


def run_overrides(max_minutes: float) -> list[str]:
    """What both runs share on top of their config: one thread, and the time budget decides the steps."""
    return ["train.threads=1", f"train.max_time={max_minutes * 60:g}", "train.max_steps=null"]


# -- tokenizer and data --------------------------------------------------------------------


def prepare_data(work: Path, train: Path) -> Path:
    """The quickstart's BPE tokenizer trained on ``train`` and the data encoded with it (reused)."""
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.app.quickstart import VOCAB
    from alilama_core.contracts.tokenizer import END_OF_TEXT
    from alilama_core.engine.registry import get_tokenizer
    from alilama_core.runs.tokenizers import save_tokenizer

    tokenizer_dir, data_dir = work / "tokenizer", work / "data"
    if not (tokenizer_dir / "tokenizer_config.json").is_file():
        started = time.perf_counter()
        tokenizer = get_tokenizer("bpe").train(iter_documents([str(train)]), VOCAB, special_tokens=[END_OF_TEXT])
        save_tokenizer(tokenizer, tokenizer_dir)
        print(f"trained a {tokenizer.vocab_size}-id BPE tokenizer in {time.perf_counter() - started:.0f} s")
    if not (data_dir / "meta.json").is_file():
        meta = prepare([str(train)], tokenizer_dir, data_dir, val_fraction=VAL_FRACTION, overwrite=True, threads=1)
        print(f"encoded {meta['splits']['train']['tokens']:,} train tokens -> {data_dir}")
    return data_dir


def vocab_size(data_dir: Path) -> int:
    from alilama_core.runs.tokenizers import load_tokenizer

    return load_tokenizer(data_dir / "tokenizer").vocab_size


# -- training --------------------------------------------------------------------------------


def train_command(name: str, work: Path, data_dir: Path, minutes: float) -> list[str]:
    """The ``alilama train`` command line of run ``name`` (the quickstart's config is written to a file)."""
    from alilama_core.app.quickstart import quickstart_config
    from alilama_core.engine import configs as cfgmod

    alilama = str(Path(sys.executable).parent / "alilama")
    common = ["--data", str(data_dir), "--out", str(work / name), "--overwrite", "--no-progress"]
    if name == "quickstart":
        config = work / "quickstart.yaml"
        cfgmod.save(quickstart_config(vocab_size(data_dir)), config)
        return [alilama, "train", "--config", str(config), *common, *run_overrides(minutes)]
    size = f"model.vocab_size={vocab_size(data_dir)}"
    return [alilama, "train", "--preset", "essay", *common, size, *run_overrides(minutes)]


def is_trained(run: Path, minutes: float) -> bool:
    """Whether ``run`` finished under this very budget (so it can be reused)."""
    from alilama_core.engine import configs as cfgmod

    if not (run / "final" / "model.safetensors").is_file() or not (run / "config.yaml").is_file():
        return False
    return cfgmod.load(run / "config.yaml").train.max_time == float(f"{minutes * 60:g}")


def train_runs(work: Path, data_dir: Path, minutes: dict[str, float], retrain: bool) -> dict[str, float]:
    """Train the runs that need it, concurrently; returns each new run's wall-clock seconds."""
    started, procs = {}, {}
    for name in RUNS:
        if not retrain and is_trained(work / name, minutes[name]):
            print(f"{name}: reusing {work / name}")
            continue
        command = train_command(name, work, data_dir, minutes[name])
        print(f"{name}: {shlex.join(command)} > {work / (name + '.log')}")
        log = open(work / f"{name}.log", "w", encoding="utf-8")
        started[name] = time.perf_counter()
        procs[name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO), log)
    wall = {}
    for name, (proc, log) in procs.items():
        code = proc.wait()
        wall[name] = time.perf_counter() - started[name]
        log.close()
        if code != 0:
            tail = (work / f"{name}.log").read_text(encoding="utf-8", errors="replace")[-3000:]
            raise SystemExit(f"{name} failed (exit {code}); the end of {work / (name + '.log')}:\n{tail}")
        print(f"{name}: trained in {wall[name] / 60:.1f} min")
    return wall


# -- measuring --------------------------------------------------------------------------------


def training_record(run: Path) -> dict:
    """Steps, tokens and minutes trained, and the last in-training val loss, from ``metrics.jsonl``."""
    from alilama_core.app.plot import read_metrics
    from alilama_core.runs.checkpoint import read_run_json

    rows = read_metrics(run)
    last = rows[-1]
    evals = [r for r in rows if "val_loss" in r]
    started = [h["time"] for h in read_run_json(run).get("history", []) if h.get("action") == "start"]
    return {
        "steps": last["step"],
        "tokens": last["tokens"],
        "minutes": last["elapsed_s"] / 60,
        "train_loss": last["train_loss"],
        "split_val_loss": evals[-1]["val_loss"] if evals else None,
        "started": started[-1] if started else None,
    }


def model_record(loaded) -> dict:
    cfg = loaded.config
    return {
        "parameters": sum(p.numel() for p in loaded.model.parameters()),
        "d_model": cfg.model.d_model,
        "n_layers": cfg.model.n_layers,
        "n_heads": cfg.model.n_heads,
        "vocab_size": cfg.model.vocab_size,
        "context_length": cfg.model.context_length,
        "positional": cfg.model.positional,
        "batch_size": cfg.train.batch_size,
        "lr": cfg.train.lr,
        "max_time_s": cfg.train.max_time,
    }


def valid_record(run: Path, valid: Path) -> dict:
    """Loss and bits per byte on all of ``valid`` at context ``EVAL_CONTEXT``."""
    from alilama_core.runs.evaluate import evaluate_run

    (row,) = evaluate_run(run, [str(valid)], [EVAL_CONTEXT], max_tokens=None)
    return {"loss": row.loss, "bpb": row.bpb, "tokens": row.tokens, "context": row.context_length}


def sample_records(loaded) -> list[dict]:
    """One continuation per quickstart prompt, seed = the prompt's index."""
    from alilama_core.app.quickstart import SAMPLE_PROMPTS
    from alilama_core.engine.generation import SamplingSettings, generate_text

    samples = []
    for seed, prompt in enumerate(SAMPLE_PROMPTS):
        settings = SamplingSettings(**SAMPLING, seed=seed)
        samples.append({"prompt": prompt, "seed": seed, "text": generate_text(loaded, prompt, settings)})
    return samples


def measure(run: Path, valid: Path) -> dict:
    from alilama_core.runs.checkpoint import load_run

    loaded = load_run(run)
    return {
        "model": model_record(loaded),
        "training": training_record(run),
        "valid": valid_record(run, valid),
        "samples": sample_records(loaded),
    }


def reproduce_command(long_minutes: float, quick_minutes: float) -> str:
    parts = [".venv/bin/python", SCRIPT, "--long-minutes", f"{long_minutes:g}"]
    if abs(quick_minutes - quickstart_budget_minutes()) > 1e-9:
        parts += ["--quick-minutes", f"{quick_minutes:g}"]
    return shlex.join(parts)


# -- rendering (from the JSON alone) -----------------------------------------------------------


def escape(text: str) -> str:
    """``text`` on one line, with Markdown's active characters escaped."""
    text = " ".join(text.split())
    for char in "\\`*_[]<>|#":
        text = text.replace(char, "\\" + char)
    return text


def table(results: dict, full: bool) -> list[str]:
    head = ["run", "model", "steps", "tokens", "minutes", "val loss", "val bpb"] if full else None
    head = head or ["run", "steps", "minutes", "val loss", "val bpb"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for name in RUNS:
        run = results["runs"][name]
        t, v, m = run["training"], run["valid"], run["model"]
        cells = [f"`{name}`", f"{t['steps']:,}", f"{t['minutes']:.1f}", f"{v['loss']:.3f}", f"**{v['bpb']:.3f}**"]
        if full:
            model = f"{m['parameters'] / 1e6:.2f}M params, {m['n_layers']} layers"
            cells[1:1] = [model]
            cells[3:3] = [f"{t['tokens'] / 1e6:.2f}M"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def sample_lines(sample: dict) -> list[str]:
    """A sample as a quote, its prompt in bold."""
    text = sample["text"]
    gap = " " if text[:1].isspace() else ""
    return [f"> **{escape(sample['prompt'])}**{gap}{escape(text)}", ""]


def render(results: dict, target: str) -> str:
    """The Markdown block of ``target`` ("readme" or "training"), from ``results`` alone."""
    if target not in DOCS:
        raise ValueError(f"target must be one of {', '.join(DOCS)}, got {target!r}")
    s = results["settings"]
    image = f"![training and validation loss of both runs]({IMAGE[target]})"
    budget = (
        f"`quickstart` is the quickstart's model under its {s['quick_minutes']:.1f}-minute training budget; "
        f"`long` is the essay preset under {s['long_minutes']:g} minutes"
    )
    if target == "readme":
        lines = [
            f"Two runs on TinyStories (`train.txt`), one CPU thread each: {budget}. "
            f"Validation loss and bits per byte on `valid.txt` at context {s['eval_context']}:",
            "",
            *table(results, full=False),
            "",
            image,
            "",
        ]
        for name in RUNS:
            lines += [f"`{name}`, seed {results['runs'][name]['samples'][0]['seed']}:", ""]
            lines += sample_lines(results["runs"][name]["samples"][0])
        lines += [f"Reproduce with `{results['command']}`; more in docs/training.md.", ""]
        return "\n".join(lines)
    load_start, load_end = (", ".join(f"{x:.1f}" for x in results["loadavg"][k]) for k in ("start", "end"))
    lines = [
        f"Two runs on TinyStories (`train.txt`, {s['vocab_size']:,}-id BPE tokenizer), trained at the same "
        f"time, one CPU thread each: {budget}.",
        "",
        *table(results, full=True),
        "",
        f"**val bpb** is bits per byte on all of `valid.txt` (text no run trained on) at context "
        f"{s['eval_context']}: the loss in bits divided by the bytes of text predicted, so it compares "
        "across tokenizers. Lower is better. **val loss** is the same in nats per token. **minutes** is "
        "the wall-clock time of training, its evaluations included. Your own run on the same settings "
        "should land near these; far above them means something is off.",
        "",
        f"The machine was shared ({results['cpu_count']} CPUs; load average {load_start} at the start and "
        f"{load_end} at the end), so the steps done within a time budget vary from run to run and machine "
        "to machine; compare bits per byte at similar step counts.",
        "",
        image,
        "",
        f"In the curves, *val* is the loss on the {s['val_fraction']:.0%} of `train.txt`'s stories that "
        "`alilama data prepare` held out (`--val-fraction`), measured during training; the table's numbers "
        "are on `valid.txt`.",
        "",
        f"Samples (temperature {s['sampling']['temperature']:g}, top-k {s['sampling']['top_k']}, "
        f"{s['sampling']['max_new_tokens']} new tokens, the prompt in bold):",
        "",
    ]
    for name in RUNS:
        lines += [f"`{name}`:", ""]
        for sample in results["runs"][name]["samples"]:
            lines += [f"- seed {sample['seed']}:", ""]
            lines += ["  " + line if line else line for line in sample_lines(sample)]
    lines += [
        f"To reproduce (this took {results['script_minutes']:.0f} minutes; the work goes to `build/good-run/`, "
        "and `--report-only` re-renders these blocks from the JSON):",
        "",
        "```bash",
        results["command"],
        "```",
        "",
        f"Measured on {results['date']} with torch {results['torch']}; every figure here comes from "
        "`docs/figures/good_run.json`, which the script writes.",
        "",
    ]
    return "\n".join(lines)


# -- writing the docs ---------------------------------------------------------------------------


def replace_block(text: str, block: str) -> str:
    """``text`` with what lies between the marker lines replaced by ``block``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"the page must hold {BEGIN} and {END} once each")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + block + END + tail


def read_block(text: str) -> str:
    """What lies between the marker lines (the inverse of ``replace_block``)."""
    inside = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return inside[1:] if inside.startswith("\n") else inside


def write_docs(results: dict, docs_root: Path) -> None:
    from alilama_core.base.files import atomic_write_text

    for target, page in DOCS.items():
        path = docs_root / page
        atomic_write_text(path, replace_block(path.read_text(encoding="utf-8"), render(results, target)))
        print(f"wrote the good-run block of {path}")


# -- the whole ------------------------------------------------------------------------------


def run_all(args) -> dict:
    import torch

    from alilama_core.app.plot import plot_runs

    load_start, started = os.getloadavg(), time.perf_counter()
    work = args.work
    if args.retrain and work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    data_dir = prepare_data(work, args.train)
    minutes = {"quickstart": args.quick_minutes, "long": args.long_minutes}
    wall = train_runs(work, data_dir, minutes, args.retrain)
    figures = args.docs_root / "docs" / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    plot_runs([work / name for name in RUNS], figures / IMAGE_NAME)
    runs = {name: measure(work / name, args.valid) for name in RUNS}
    for name in RUNS:
        runs[name]["training"]["wall_minutes"] = wall[name] / 60 if name in wall else None
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "loadavg": {"start": list(load_start), "end": list(os.getloadavg())},
        "script_minutes": (time.perf_counter() - started) / 60,
        "command": reproduce_command(args.long_minutes, args.quick_minutes),
        "settings": {
            "train_file": args.train.name,
            "valid_file": args.valid.name,
            "vocab_size": vocab_size(data_dir),
            "quick_minutes": args.quick_minutes,
            "long_minutes": args.long_minutes,
            "threads_per_run": 1,
            "eval_context": EVAL_CONTEXT,
            "val_fraction": VAL_FRACTION,
            "sampling": SAMPLING,
            "overrides": {name: run_overrides(minutes[name]) for name in RUNS},
        },
        "runs": runs,
    }


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long-minutes", type=float, default=30.0, help="time budget of the long run")
    parser.add_argument(
        "--quick-minutes",
        type=float,
        default=None,
        help="time budget of the quickstart run (default: the quickstart's)",
    )
    parser.add_argument("--retrain", action="store_true", help="train the tokenizer, data and runs again")
    parser.add_argument("--work", type=Path, default=WORK, help="work folder (tokenizer, data, runs, logs)")
    parser.add_argument("--docs-root", type=Path, default=REPO, help="where README.md and docs/ are")
    parser.add_argument("--report-only", action="store_true", help="re-render the blocks from the JSON")
    parser.add_argument("--train", type=Path, default=DATA / "train.txt", help=argparse.SUPPRESS)
    parser.add_argument("--valid", type=Path, default=DATA / "valid.txt", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick_minutes is None:
        args.quick_minutes = quickstart_budget_minutes()
    return args


def main(argv: list[str] | None = None) -> int:
    from alilama_core.base.files import atomic_write_text

    args = parse_args(argv)
    out = args.docs_root / "docs" / "figures" / JSON_NAME
    if args.report_only:
        results = json.loads(out.read_text(encoding="utf-8"))
    else:
        for path in (args.train, args.valid):
            if not path.is_file():
                print(f"error: {path} not found (this needs the shared TinyStories files)", file=sys.stderr)
                return 1
        results = run_all(args)
        atomic_write_text(out, json.dumps(results, indent=2) + "\n")
        print(f"wrote {out}")
    write_docs(results, args.docs_root)
    for name in RUNS:
        run = results["runs"][name]
        print(
            f"{name}: {run['training']['steps']} steps in {run['training']['minutes']:.1f} min, "
            f"valid loss {run['valid']['loss']:.3f}, bpb {run['valid']['bpb']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
