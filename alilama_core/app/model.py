"""``alilama model``: inspect model configurations."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from alilama_core.app.common import (
    ConfigHelpCommand,
    ConfigOpt,
    JsonOpt,
    OverridesArg,
    PresetOpt,
    console,
    help_examples,
    resolve_config,
    warn_replacements,
)

model_app = typer.Typer(
    help="Inspect model configurations.",
    no_args_is_help=True,
    epilog=help_examples("alilama model info --preset essay"),
)


@model_app.command(
    "info",
    cls=ConfigHelpCommand,
    context_settings={"ignore_unknown_options": True},
    epilog=help_examples(
        "alilama model info --preset essay",
        "alilama model info --preset essay model.positional=rope model.n_layers=4",
        "alilama model info --config configs/essay.yaml --json",
    ),
)
def model_info(
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    overrides: OverridesArg = None,
    as_json: JsonOpt = False,
) -> None:
    """Build a model from a config and print its parameter table, plugins and bias memory."""
    from alilama_core.app.info import model_report

    cfg = resolve_config(config, preset, overrides)
    report = model_report(cfg.model)
    warn_replacements()  # on stderr, also beside --json
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table(title=f"Parameters ({report['parameters']:,} total, tied head counted once)")
    for col in ("parameter", "shape", "copies", "parameters"):
        table.add_column(col, justify="left" if col in ("parameter", "shape") else "right")
    for row in report["table"]:
        table.add_row(row["name"], str(tuple(row["shape"])), str(row["count"]), f"{row['numel']:,}")
    console.print(table)
    m = cfg.model
    console.print(
        f"model: d_model={m.d_model} n_layers={m.n_layers} n_heads={m.n_heads} d_mlp={m.d_mlp} "
        f"context={m.context_length} vocab={m.vocab_size}",
        highlight=False,
    )
    for kind in ("positional", "attention"):
        p = report["plugins"][kind]
        replaces = f"; REPLACES {p['replaces']}'s {p['name']!r}" if p["replaces"] else ""
        console.print(
            f"{kind}: {p['name']} ({p['distribution']} {p['version']}{replaces}; {p['detail']})",
            highlight=False,
            markup=False,
        )
    console.print(f"bias memory: {report['bias_memory']}", highlight=False, markup=False, soft_wrap=True)
