"""A sweep's plot, ``results.png``: the metric against each swept field, one panel per field."""

from __future__ import annotations

from pathlib import Path

from alilama_core.runs import sweeps
from alilama_core.runs.outputs import save_figure
from alilama_core.runs.sweeps import Plan


def plot_sweep(plan: Plan, out: str | Path) -> Path:
    """The metric against each swept field (one panel each; seeds averaged, their spread as error bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = [k for k in plan.space if not sweeps.is_seed(k)] or list(plan.space)
    fig, axes = plt.subplots(1, len(fields), figsize=(5.5 * len(fields), 4.5), dpi=120, squeeze=False)
    for ax, swept in zip(axes[0], fields):
        values = sweeps.field_values(plan, swept)
        numeric = sweeps.is_range(plan.space[swept])  # a range: the values on a number line (log for loguniform)
        joined = not numeric and swept != sweeps.POINT  # named points have no order: no line between them
        for i, (label, points) in enumerate(sorted(sweeps.series(plan, swept).items())):
            kept = [v for v in values if points[v]]
            xs = [float(v) for v in kept] if numeric else [values.index(v) for v in kept]
            means = [sum(points[v]) / len(points[v]) for v in kept]
            spread = [_std(points[v]) for v in kept]
            style = dict(marker="o", capsize=4, color=f"C{i}", label=", ".join(label) or None)
            ax.errorbar(xs, means, yerr=spread, linestyle="-" if joined else "none", **style)
        if numeric:
            ax.set_xscale("log" if "loguniform" in plan.space[swept] else "linear")
        else:
            slanted = sum(len(v) for v in values) > 40  # long names side by side would overlap
            ax.set_xticks(
                range(len(values)), values, rotation=30 if slanted else 0, ha="right" if slanted else "center"
            )
        ax.set_xlabel(swept)
        ax.set_ylabel(plan.metric)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=9)
    seeds = [k for k in plan.space if sweeps.is_seed(k)]
    note = f" (mean over {', '.join(seeds)}; bars: standard deviation)" if seeds else ""
    fig.suptitle(f"{plan.metric} by swept setting{note}")
    return save_figure(fig, out)


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
