"""What every command module shares: consoles, the error-printing group, option aliases, config resolution."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from alilama_core.errors import AlilamaError

console = Console()
err_console = Console(stderr=True)


class _Group(TyperGroup):
    """Turns Alilama's own errors into one clear line and exit status 1 (no traceback)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except AlilamaError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except OSError as exc:  # the file system refused (permissions, a full disk, a file for a folder)
            if exc.filename is None:
                raise
            where = f"{exc.filename!s}" + (f" -> {exc.filename2!s}" if exc.filename2 else "")
            err_console.print(
                f"[bold red]error:[/] {escape(exc.strerror or str(exc))}: {escape(where)}; check the path and its permissions",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(1) from None


# Shared option aliases.
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="YAML or JSON config file.")]
PresetOpt = Annotated[Optional[str], typer.Option("--preset", "-p", help="Named preset: essay, tiny.")]
OverridesArg = Annotated[
    Optional[list[str]],
    typer.Argument(help="Overrides as section.field=value, e.g. model.n_layers=4 model.positional=rope."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def resolve_config(config: str | None, preset_name: str | None, overrides: list[str] | None):
    """Config from a file or a preset (default ``essay``), then overrides; validated."""
    from alilama_core import config as cfgmod

    if config and preset_name:
        raise AlilamaError("give either --config or --preset, not both")
    cfg = cfgmod.load(config) if config else cfgmod.preset(preset_name or "essay")
    return cfgmod.apply_overrides(cfg, overrides).validate()
