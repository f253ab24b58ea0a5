"""Loss curves from ``RUN/metrics.jsonl``: train and val loss against tokens, several runs on one chart."""

from __future__ import annotations

import json
from pathlib import Path

from alilama_core.errors import AlilamaError
from alilama_core.files import atomic_open


def read_metrics(run: str | Path) -> list[dict]:
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise AlilamaError(f"{str(run)!r} has no metrics.jsonl (is it a run folder that has trained?)")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise AlilamaError(f"{str(path)!r} line {number} is not valid JSON: {exc}") from None
    return rows


def plot_runs(runs: list[str | Path], out: str | Path) -> Path:
    """Write a PNG with one train line and one val line per run; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise AlilamaError("give at least one run folder")
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for i, run in enumerate(runs):
        rows = read_metrics(run)
        color = f"C{i}"
        name = Path(run).name
        train = [(r["tokens"], r["train_loss"]) for r in rows if "train_loss" in r]
        val = [(r["tokens"], r["val_loss"]) for r in rows if "val_loss" in r]
        if train:
            ax.plot(*zip(*train), color=color, alpha=0.6, lw=1, label=f"{name} train")
        if val:
            ax.plot(*zip(*val), color=color, marker="o", lw=2, label=f"{name} val")
    ax.set_xlabel("tokens")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("Alilama training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    out = Path(out)
    try:
        with atomic_open(out, "wb") as f:
            fig.savefig(f, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)
    return out
