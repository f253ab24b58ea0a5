"""Loss curves from ``RUN/metrics.jsonl``: train and val loss against tokens, several runs on one chart."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from alilama_core.base.errors import AlilamaError, AlilamaWarning
from alilama_core.runs.checkpoint import read_metrics
from alilama_core.runs.outputs import save_figure


def plot_runs(runs: list[str | Path], out: str | Path) -> Path:
    """Write a PNG with one train line and one val line per run; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise AlilamaError("give at least one run folder")
    check_image_path(out)
    metrics = [read_metrics(run) for run in runs]  # every run is readable before anything is drawn
    fig, ax = plt.subplots(figsize=(10, 6), dpi=120)
    for i, (run, rows) in enumerate(zip(runs, metrics)):
        color = f"C{i}"
        name = Path(run).name
        train, val = _points(run, rows, "train_loss"), _points(run, rows, "val_loss")
        if train:
            ax.plot(*zip(*train), color=color, alpha=0.6, lw=1, label=f"{name} train")
        if val:
            ax.plot(*zip(*val), color=color, marker="o", lw=2, label=f"{name} val")
    ax.set_xlabel("tokens")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("Alilama training loss")
    return save_figure(_readable(fig, ax), out)


def _points(run, rows: list[dict], key: str) -> list[tuple]:
    """``(tokens, key)`` of each metrics row that has ``key``; rows whose values are not numbers are left
    out with a warning (a string is never plotted as a number)."""
    found = [(r.get("tokens"), r[key]) for r in rows if key in r]
    points = [p for p in found if is_number(p[0]) and is_number(p[1])]
    if len(points) < len(found):
        warnings.warn(
            AlilamaWarning(
                f"left out {len(found) - len(points)} row(s) of {str(Path(run) / 'metrics.jsonl')!r} whose "
                f"tokens or {key} is not a number"
            ),
            stacklevel=2,
        )
    return points


def read_eval(path: str | Path) -> list[dict]:
    """Rows of an ``alilama eval --json`` output file."""
    path = Path(path)
    if not path.is_file():
        raise AlilamaError(
            f"{str(path)!r} does not exist (write one with `alilama eval RUN --data FILE --json > {path.name}`)"
        )
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AlilamaError(f"{str(path)!r} is not the JSON that `alilama eval --json` writes: {exc}") from None
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and "context_length" in r and "bpb" in r for r in rows
    ):
        raise AlilamaError(f"{str(path)!r} is not a list of eval rows (context_length, bpb); use `alilama eval --json`")
    for i, row in enumerate(rows):
        for key in ("context_length", "bpb"):
            value = row[key]
            if not (is_number(value) or (key == "bpb" and value is None)):
                raise AlilamaError(
                    f"{str(path)!r} row {i}: {key} is {value!r}, not a number, so it cannot be plotted; write the "
                    f"file again with `alilama eval RUN --data FILE --json > {path.name}`"
                )
    return rows


def is_number(value) -> bool:
    """An int or a float (not a bool, not a number written as a string)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plot_eval(results: list[str | Path], out: str | Path, dpi: int = 120) -> Path:
    """Bits per byte against context length, one line per eval file (and data file): the extrapolation figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not results:
        raise AlilamaError("give at least one `alilama eval --json` output file")
    check_image_path(out)
    fig, ax = plt.subplots(figsize=(10, 6), dpi=dpi)
    for i, result in enumerate(results):
        rows = read_eval(result)
        files = sorted({r.get("file", "") for r in rows})
        for j, data in enumerate(files):
            points = sorted(
                (r["context_length"], r["bpb"]) for r in rows if r.get("file", "") == data and r["bpb"] is not None
            )
            label = Path(result).stem + (f" ({Path(data).name})" if len(files) > 1 else "")
            if points:
                ax.plot(*zip(*points), color=f"C{i}", ls=("-", "--", ":", "-.")[j % 4], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("bits per byte")
    ax.set_title("bits per byte against context length")
    return save_figure(_readable(fig, ax), out)


def _readable(fig, ax):
    """Fonts large enough to read at the figure's size, a light grid, and the legend beside the plot when it is long."""
    ax.title.set_fontsize(14)
    ax.xaxis.label.set_fontsize(12)
    ax.yaxis.label.set_fontsize(12)
    ax.tick_params(labelsize=11)
    ax.grid(alpha=0.3)
    entries = len(ax.get_legend_handles_labels()[1])
    if entries > 8:  # a long legend would hide the lines: put it outside, on the right
        ax.legend(fontsize=10, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    elif entries:
        ax.legend(fontsize=11)
    return fig


def check_image_path(out: str | Path) -> None:
    """Refuse an image path that is a folder, or runs through a file, before any work."""
    out = Path(out)
    if out.is_dir():
        raise AlilamaError(f"--out {str(out)!r} is a folder; give a file path such as {str(out / 'loss.png')!r}")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise AlilamaError(f"cannot write {str(out)!r}: {str(parent)!r} is a file, not a folder")
            break
