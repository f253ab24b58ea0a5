"""The length-generalisation study of docs/tasks.md, from training to the table and the plot.

Every positional scheme is trained on each task at lengths 1..N and scored at
N, 2N and 4N on fixed, seeded test sets, for several seeds. Runs go seed by
seed, so a wall-clock budget that stops early still leaves whole seeds.
Finished runs are kept in ``OUT/results.json`` and skipped when the script is
run again, so an interrupted study continues where it stopped.

    .venv/bin/python scripts/study_tasks.py                    # the study as in the docs
    .venv/bin/python scripts/study_tasks.py --budget-min 40 --seeds 3
    .venv/bin/python scripts/study_tasks.py --report-only      # rewrite table and plot from results.json
    .venv/bin/python scripts/study_tasks.py --logger tensorboard  # every run also in OUT/tensorboard/<run>

The table replaces the text between the study markers in docs/tasks.md; the
plot is written to docs/img/tasks-study.png.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = ["alibi", "rope", "learned", "nope", "sinusoidal"]
TASKS = ["copy", "reverse", "sort"]
MODEL = {"d_model": 64, "n_heads": 4, "n_layers": 4, "d_mlp": 256, "attention": "auto"}
TRAIN = {
    "batch_size": 64,
    "lr": 0.003,
    "min_lr": 0.0003,
    "warmup_steps": 50,
    "eval_every": 250,
    "checkpoint_every": 100000,
    "log_every": 50,
    "sample_prompts": [],
}
BEGIN, END = "<!-- study:begin -->", "<!-- study:end -->"


def train_one(task: str, scheme: str, seed: int, args, folder: Path) -> dict:
    """Train one run and score it at N, 2N, 4N; returns its result row."""
    from alilama_core.engine import configs as cfgmod
    from alilama_core.engine.registry import get_trainer
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.tasks import evaluate_task, get_task

    built = get_task(task)
    n = args.length
    cfg = cfgmod.Config()
    cfg.task.name, cfg.task.lengths, cfg.task.seed = task, f"1-{n}", args.test_seed
    for key, value in MODEL.items():
        setattr(cfg.model, key, value)
    cfg.model.positional = scheme
    cfg.model.vocab_size = len(built.vocabulary())
    cfg.model.context_length = built.sequence_length(n) - 1
    for key, value in TRAIN.items():
        setattr(cfg.train, key, value)
    cfg.train.max_steps, cfg.train.seed = args.steps, seed
    if args.logger:  # every run of the study into one tracker, side by side
        from alilama_loggers import shared_tracker

        cfg = cfgmod.apply_overrides(cfg, shared_tracker(args.logger, args.out, "study-tasks"))
    started = time.perf_counter()
    get_trainer("default")(cfg.validate(), echo=lambda *a, **k: None, show_progress=False).fit(
        "", str(folder), overwrite=True
    )
    seconds = time.perf_counter() - started
    model = load_run(folder).model
    rows = evaluate_task(model, built, [n, 2 * n, 4 * n], examples=args.examples, seed=args.test_seed)
    return {
        "task": task,
        "scheme": scheme,
        "seed": seed,
        "train_seconds": round(seconds, 1),
        "scores": {str(r.length): {"exact": r.exact_match, "token": r.token_accuracy, "note": r.note} for r in rows},
    }


def run_study(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index, workers = (int(x) for x in args.worker.split("/"))
    results_path = out / ("results.json" if workers == 1 else f"results-{index}of{workers}.json")
    results = json.loads(results_path.read_text()) if results_path.is_file() else {"runs": []}
    results["setup"] = setup(args)
    done = {(r["task"], r["scheme"], r["seed"]) for r in load_results(out)["runs"]}
    deadline = time.monotonic() + args.budget_min * 60
    plan = [(seed, task, scheme) for seed in range(args.seeds) for task in args.tasks for scheme in args.schemes]
    for seed, task, scheme in plan[index::workers]:  # seed by seed; worker i of k takes every k-th run
        if (task, scheme, seed) in done:
            continue
        if time.monotonic() > deadline:
            print("wall-clock budget spent; stopping (rerun to continue)", flush=True)
            return write_results(results, results_path)
        row = train_one(task, scheme, seed, args, out / f"{task}-{scheme}-s{seed}")
        results["runs"].append(row)
        write_results(results, results_path)
        scores = " ".join(
            f"{k}:{v['exact'] if v['exact'] is None else round(v['exact'], 3)}" for k, v in row["scores"].items()
        )
        print(f"{task:8s} {scheme:10s} seed {seed}  {row['train_seconds']:6.1f}s  exact {scores}", flush=True)
    write_results(results, results_path)


def setup(args) -> dict:
    import torch

    return {
        "length": args.length,
        "steps": args.steps,
        "examples": args.examples,
        "test_seed": args.test_seed,
        "model": MODEL,
        "train": {k: v for k, v in TRAIN.items() if k != "sample_prompts"},
        "threads": args.threads,
        "workers": args.worker.split("/")[1],
        "torch": torch.__version__,
        "machine": platform.machine(),
    }


def load_results(out: Path) -> dict:
    """Every finished run in ``OUT/results*.json`` (one file per worker), and the setup."""
    merged: dict = {"runs": []}
    for path in sorted(out.glob("results*.json")):
        data = json.loads(path.read_text())
        merged["setup"] = data.get("setup", merged.get("setup"))
        merged["runs"] += data["runs"]
    merged["runs"].sort(key=lambda r: (r["task"], r["scheme"], r["seed"]))
    return merged


def write_results(results: dict, path: Path) -> None:
    from alilama_core.base.files import atomic_write_text

    atomic_write_text(path, json.dumps(results, indent=1) + "\n")


# -- report ----------------------------------------------------------------------------------


def summarise(results: dict, metric: str = "exact") -> dict:
    """(task, scheme, length) -> list of per-seed values of ``metric`` (None: n/a)."""
    table: dict = {}
    for r in results["runs"]:
        for length, s in r["scores"].items():
            table.setdefault((r["task"], r["scheme"], int(length)), []).append(s[metric])
    return table


def cell(values: list) -> str:
    if not values or any(v is None for v in values):
        return "n/a"
    pct = [100 * v for v in values]
    mean = statistics.fmean(pct)
    return f"{mean:.0f}" if len(pct) == 1 else f"{mean:.0f} ({min(pct):.0f}–{max(pct):.0f})"


def markdown_table(table: dict, tasks, schemes, lengths, n, seeds) -> list[str]:
    head = " | ".join(f"L={x}" + (" (trained)" if x == n else "") for x in lengths)
    lines = [f"| task | scheme | seeds | {head} |", "|---|---|---|" + "---|" * len(lengths)]
    for task in tasks:
        for scheme in schemes:
            if (task, scheme) in seeds:
                cells = " | ".join(cell(table.get((task, scheme, x), [])) for x in lengths)
                lines.append(f"| {task} | {scheme} | {len(seeds[(task, scheme)])} | {cells} |")
    return lines


def seed_spread(exact: dict, token: dict) -> list[str]:
    """A sentence on how far seeds disagree (cells with several seeds and no n/a)."""

    def spreads(table, keep=lambda v: True):
        return [max(v) - min(v) for v in table.values() if len(v) > 1 and None not in v and keep(v)]

    open_cells = spreads(exact, lambda v: not (max(v) < 0.005 or min(v) > 0.995))
    all_exact, all_token = spreads(exact), spreads(token)
    if not all_exact:
        return ["(One seed per cell: nothing to say about how much seeds disagree.)"]
    text = (
        f"How much seeds disagree (highest minus lowest seed, in points): exact match up to {100 * max(all_exact):.0f}"
    )
    if open_cells:
        text += (
            f", median {100 * statistics.median(open_cells):.0f} over the {len(open_cells)} cells where some "
            "seed is neither at 0% nor at 100%"
        )
    text += f"; per-token accuracy median {100 * statistics.median(all_token):.0f}, up to {100 * max(all_token):.0f}."
    return [text]


def report(args) -> None:
    out = Path(args.out)
    results = load_results(out)
    table = summarise(results)
    s = results["setup"]
    n = s["length"]
    lengths = [n, 2 * n, 4 * n]
    tasks = list(dict.fromkeys(t for t in [*TASKS, *sorted({k[0] for k in table})] if any(k[0] == t for k in table)))
    schemes = [x for x in SCHEMES if any(k[1] == x for k in table)]
    seeds: dict = {}
    for r in results["runs"]:
        seeds.setdefault((r["task"], r["scheme"]), set()).add(r["seed"])
    minutes = sum(r["train_seconds"] for r in results["runs"]) / 60
    m = s["model"]
    lines = [
        BEGIN,
        (
            f"Trained on lengths 1–{n} for {s['steps']} steps of {s['train']['batch_size']} examples; model "
            f"d={m['d_model']}, {m['n_layers']} blocks, {m['n_heads']} heads, MLP {m['d_mlp']}; "
            f"{len(results['runs'])} runs, {minutes:.0f} minutes of training in all on a shared 2-core CPU "
            f"(torch {s['torch']}, {s['threads']} thread per run). Each cell: the mean over seeds, then the "
            f"lowest and highest seed in brackets, in percent, on {s['examples']} fixed test examples per length. "
            "`n/a`: the learned position table has no positions for that length."
        ),
        "",
        "**Exact match (%)**",
        "",
        *markdown_table(table, tasks, schemes, lengths, n, seeds),
        "",
        "**Per-token accuracy (%)**, teacher-forced",
        "",
        *markdown_table(summarise(results, "token"), tasks, schemes, lengths, n, seeds),
    ]
    lines += ["", *seed_spread(table, summarise(results, "token"))]
    lines += ["", "![Exact match and per-token accuracy against length](img/tasks-study.png)", END]
    doc = ROOT / "docs" / "tasks.md"
    text = doc.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        from alilama_core.base.files import atomic_write_text

        text = text[: text.index(BEGIN)] + "\n".join(lines) + text[text.index(END) + len(END) :]
        atomic_write_text(doc, text)
    print("\n".join(lines))
    tables = {"exact match": table, "per-token accuracy": summarise(results, "token")}
    plot(tables, tasks, schemes, lengths, n, ROOT / "docs" / "img" / "tasks-study.png")
    sort_run = out / "sort-nope-s0"
    if sort_run.is_dir():  # the attention of a sort run: reading the tape by content
        from alilama_core.app.viz import attention_pictures

        for path in attention_pictures(str(sort_run), "52816=12568", out / "viz-sort", html=False):
            (ROOT / "docs" / "img" / "tasks-sort-attention.png").write_bytes(path.read_bytes())


def plot(tables: dict, tasks, schemes, lengths, n, path: Path) -> None:
    """One column per task, one row per metric: the mean over seeds as a line, each seed as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from alilama_core.base.files import atomic_open

    fig, axes = plt.subplots(
        len(tables), len(tasks), figsize=(4 * len(tasks), 3.3 * len(tables)), dpi=110, sharey=True, squeeze=False
    )
    for row, (metric, table) in enumerate(tables.items()):
        for ax, task in zip(axes[row], tasks):
            for i, scheme in enumerate(schemes):
                xs, means = [], []
                for x in lengths:
                    values = table.get((task, scheme, x), [])
                    if values and None not in values:
                        xs.append(x)
                        means.append(statistics.fmean(values))
                        ax.scatter([x] * len(values), values, color=f"C{i}", s=10, alpha=0.5)
                if xs:
                    ax.plot(xs, means, marker="o", color=f"C{i}", label=scheme)
            ax.axvline(n, color="grey", ls=":", lw=1)
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths, [str(x) for x in lengths])
            ax.set_title(f"{task}: {metric}", fontsize=10)
            ax.grid(alpha=0.3)
            if row == len(tables) - 1:
                ax.set_xlabel("length (dotted: longest trained)")
        axes[row][0].set_ylabel(f"{metric} (dots: seeds)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png")
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/study-tasks")
    p.add_argument("--tasks", nargs="+", default=TASKS)
    p.add_argument("--schemes", nargs="+", default=SCHEMES)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--length", type=int, default=8, help="N: train on lengths 1..N, test at N, 2N, 4N")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--examples", type=int, default=256, help="test examples per length")
    p.add_argument("--test-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--budget-min", type=float, default=40.0, help="stop starting runs after this many minutes")
    p.add_argument("--worker", default="0/1", help="i/k: run every k-th run from the i-th (parallel workers)")
    p.add_argument("--report-only", action="store_true")
    p.add_argument(
        "--logger",
        choices=["tensorboard", "mlflow", "wandb", "csv"],
        help="also log every run to this tracker, in one place under OUT (TensorBoard: tensorboard --logdir "
        "OUT/tensorboard; MLflow: one store OUT/mlflow.db, experiment study-tasks; W&B: project study-tasks)",
    )
    args = p.parse_args()
    if not args.report_only:
        run_study(args)
    report(args)


if __name__ == "__main__":
    main()
