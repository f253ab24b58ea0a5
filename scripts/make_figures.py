"""Regenerate the pictures of docs/tape.md (``make figures``).

Trains, once, a small ALiBi model and a RoPE twin on
``../shared/data/tinystories/train.txt`` (a few minutes on two CPU cores; the
runs are kept under ``build/figures`` and reused), then draws every figure
with the same functions ``alilama viz`` and ``alilama plot`` use, into
``docs/figures/``. ``--retrain`` starts the runs again.

    .venv/bin/python scripts/make_figures.py [--data PATH] [--steps 400] [--minutes 5] [--retrain]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "tinystories"
WORK = REPO / "build" / "figures"
FIGURES = REPO / "docs" / "figures"
VOCAB = 1024

# A prompt written for these pictures (not taken from any data split).
PROMPT = (
    "Once upon a time, there was a little girl named Mia. Mia had a red ball. "
    "She liked to play with the ball in the park. One day, the ball rolled into the pond. "
    'Mia was sad. Her friend Tom saw the ball and said, "I can help you!" '
    "Tom found a long stick and pulled the ball out of the pond. Mia was happy. "
    'She said, "Thank you, Tom!"'
)


def model_overrides(positional: str, minutes: float, steps: int) -> list[str]:
    """The essay's widths with 4 blocks: ``steps`` steps at context 128, at most ``minutes``."""
    return [
        f"model.vocab_size={VOCAB}",
        "model.n_layers=4",
        f"model.positional={positional}",
        "model.attention=sdpa",
        "train.batch_size=16",
        f"train.max_steps={steps}",
        f"train.max_time={minutes * 60}",
        "train.warmup_steps=30",
        f"train.eval_every={steps}",
        "train.eval_tokens=16384",
        "train.checkpoint_every=100000",
        "train.log_every=50",
        "train.sample_every=null",
    ]


def train_runs(data: Path, minutes: float, steps: int, retrain: bool) -> dict[str, Path]:
    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.engine import configs as cfgmod
    from alilama_core.engine.registry import get_tokenizer, get_trainer

    if retrain and WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True, exist_ok=True)
    if not (WORK / "tokenizer" / "tokenizer_config.json").is_file():
        tokenizer = get_tokenizer("bpe").train(iter_documents([str(data)]), VOCAB, special_tokens=["<|endoftext|>"])
        tokenizer.save(WORK / "tokenizer")
    if not (WORK / "data" / "meta.json").is_file():
        prepare(
            [str(data)],
            WORK / "tokenizer",
            WORK / "data",
            val_fraction=0.05,
            overwrite=True,
        )
    runs = {}
    for positional in ("alibi", "rope"):
        run = WORK / positional
        if not (run / "final" / "model.safetensors").is_file():
            cfg = cfgmod.apply_overrides(cfgmod.preset("essay"), model_overrides(positional, minutes, steps)).validate()
            started = time.perf_counter()
            get_trainer("default")(cfg, echo=print, show_progress=False).fit(
                str(WORK / "data"), str(run), overwrite=True
            )
            print(f"trained {positional} in {time.perf_counter() - started:.0f} s")
        runs[positional] = run
    return runs


def draw(runs: dict[str, Path], valid: Path) -> None:
    from alilama_core.app import viz_draw
    from alilama_core.app.plot import plot_eval
    from alilama_core.engine import configs as cfgmod
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.evaluate import evaluate_run

    FIGURES.mkdir(parents=True, exist_ok=True)
    loaded = load_run(runs["alibi"])
    tape = viz_draw.read_tape(loaded.model, loaded.tokenizer, PROMPT)
    viz_draw.draw_grid(tape, FIGURES / "attention_grid.png", max_labels=16, dpi=80)
    local, wide = viz_draw.extreme_heads(tape)
    viz_draw.draw_map(tape, FIGURES / "attention_local_head.png", *local, max_tokens=40, dpi=80)
    viz_draw.draw_map(tape, FIGURES / "attention_wide_head.png", *wide, max_tokens=40, dpi=80)
    viz_draw.draw_distances(tape, FIGURES / "head_distance.png")
    viz_draw.draw_lens(tape, FIGURES / "logit_lens.png")
    for positional in ("alibi", "rope", "sinusoidal"):
        cfg = cfgmod.apply_overrides(cfgmod.preset("essay"), [f"model.positional={positional}"]).validate()
        viz_draw.draw_positional(cfg.model, FIGURES / f"positional_{positional}.png", dpi=70)
    results = []
    for name, run in runs.items():
        rows = evaluate_run(run, [str(valid)], [64, 128, 256, 512], attention="sdpa", max_tokens=32768)
        path = WORK / f"eval_{name}.json"
        path.write_text(json.dumps([asdict(r) for r in rows], indent=2))
        results.append(path)
    plot_eval(results, FIGURES / "extrapolation.png", dpi=80)
    draw_long_context(FIGURES / "long_context.png")
    for png in sorted(FIGURES.glob("*.png")):
        shrink(png)
        print(f"{png.relative_to(REPO)}: {png.stat().st_size / 1024:.0f} KiB")
    print(f"mean attention distance by head (layer rows): {tape.distance.round(1).tolist()}")
    print(
        f"logit lens, bits per token after each block: {(-tape.next_logprob.mean(1) / math.log(2)).round(2).tolist()}"
    )


def markdown_table(page: Path, heading: str) -> list[dict[str, str]]:
    """The first table under ``## heading`` in a docs page, as rows of {column: cell} (bold marks removed)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"## {heading}")
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append([c.strip().strip("*").replace(",", "") for c in line.strip("|").split("|")])
        elif rows:
            break
    header, body = rows[0], rows[2:]
    return [dict(zip(header, r)) for r in body]


def draw_long_context(out: Path) -> None:
    """Time and peak memory against T from the long-context table of docs/benchmarks.md."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from alilama_core.base.files import atomic_open

    rows = markdown_table(
        REPO / "docs" / "benchmarks.md",
        "ALiBi at the speed of causal attention on long contexts",
    )
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for i, path in enumerate(dict.fromkeys(r["path"] for r in rows)):
        points = []
        for r in rows:
            try:
                if r["path"] == path:
                    points.append((int(r["T"]), float(r["median ms"]), float(r["peak MiB"])))
            except ValueError:  # a row that did not run ("does not fit")
                continue
        if points:
            t, ms, mib = zip(*points)
            axes[0].plot(t, ms, marker="o", color=f"C{i}", label=path)
            axes[1].plot(t, mib, marker="o", color=f"C{i}", label=path)
    for ax, label in zip(axes, ("median ms (forward + backward)", "peak MiB")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "attention alone, B=8, H=8, head dim 16, one thread (docs/benchmarks.md)",
        fontsize=9,
    )
    with atomic_open(out, "wb") as f:
        fig.savefig(f, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)


def shrink(png: Path, colours: int = 96) -> None:
    """Rewrite ``png`` with a palette of ``colours`` (the committed figures stay small)."""
    from PIL import Image

    from alilama_core.base.files import atomic_open

    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    with atomic_open(png, "wb") as f:
        small.save(f, format="PNG", optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA / "train.txt", help="training text")
    parser.add_argument(
        "--valid",
        type=Path,
        default=DATA / "valid.txt",
        help="text for the extrapolation figure",
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="most training time per run")
    parser.add_argument(
        "--steps",
        type=int,
        default=400,
        help="training steps per run (batch 16 x 128 tokens)",
    )
    parser.add_argument("--retrain", action="store_true", help="train the runs again")
    args = parser.parse_args(argv)
    for path in (args.data, args.valid):
        if not path.is_file():
            print(
                f"error: {path} not found (the figures need the shared TinyStories files)",
                file=sys.stderr,
            )
            return 1
    runs = train_runs(args.data, args.minutes, args.steps, args.retrain)
    draw(runs, args.valid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
