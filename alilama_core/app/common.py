"""What every command module shares: consoles, the error-printing group, option aliases, config resolution."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Annotated, Optional

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from alilama_core.contracts.errors import AlilamaError

console = Console()
err_console = Console(stderr=True)


@contextmanager
def clean_errors():
    """The one error funnel of every command: Alilama's errors and the file system's refusals
    (a full disk, permissions, a file for a folder) as one ``error:`` line and exit status 1, no traceback."""
    try:
        yield
    except AlilamaError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except Exception as exc:
        # the file system refused (a full disk, permissions, a file for a folder)
        from alilama_core.contracts.files import disk_full_message, disk_full_reason

        reason = disk_full_reason(exc)  # also when a library wrapped it (torch, safetensors, numpy)
        if reason is not None:  # one that the writers did not report themselves
            where = exc.filename if isinstance(exc, OSError) and exc.filename else None
            message = (
                disk_full_message(where, reason, "file", clean=False)
                if where
                else f"the disk is full ({reason}); free space on the disk this command writes to "
                "(delete files you no longer need: old runs, checkpoints, exports, caches), "
                "then run the same command again"
            )
            err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        if not isinstance(exc, OSError) or exc.filename is None:
            raise
        where = f"{exc.filename!s}" + (f" -> {exc.filename2!s}" if exc.filename2 else "")
        err_console.print(
            f"[bold red]error:[/] {escape(exc.strerror or str(exc))}: {escape(where)}; check the path and its permissions",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None


class _Group(TyperGroup):
    """Runs every command inside ``clean_errors``."""

    def invoke(self, ctx):
        with clean_errors():
            return super().invoke(ctx)


# Shared option aliases.
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="YAML or JSON config file.")]
PresetOpt = Annotated[Optional[str], typer.Option("--preset", "-p", help="Named preset: essay, tiny.")]
OverridesArg = Annotated[
    Optional[list[str]],
    typer.Argument(help="Overrides as section.field=value, e.g. model.n_layers=4 model.positional=rope."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ForceAttentionOpt = Annotated[
    bool,
    typer.Option(
        "--force-attention",
        help="Run a run trained with non-exact attention (e.g. a sliding window) with another --attention "
        "anyway (or an exact run with a non-exact one); its results are then not the model's own.",
    ),
]


@contextmanager
def loud_warnings():
    """Print Alilama's warnings raised inside the block as ``warning:`` lines on stderr (others pass on)."""
    import warnings

    from alilama_core.contracts.errors import AlilamaWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AlilamaWarning)
        yield
    for w in caught:
        if issubclass(w.category, AlilamaWarning):
            err_console.print(f"[bold yellow]warning:[/] {escape(str(w.message))}", highlight=False, soft_wrap=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def resolve_config(config: str | None, preset_name: str | None, overrides: list[str] | None):
    """Config from a file or a preset (default ``essay``), then overrides; validated."""
    from alilama_core.engine import configs as cfgmod
    from alilama_core.engine.validate import check_config

    if config and preset_name:
        raise AlilamaError("give either --config or --preset, not both")
    cfg = cfgmod.load(config) if config else cfgmod.preset(preset_name or "essay")
    return check_config(cfgmod.apply_overrides(cfg, overrides))


def warn_replacements() -> list[str]:
    """Print a ``warning:`` line on stderr for every registered name a plugin took over; the lines."""
    from alilama_core.engine.registry import get_registry

    notes = [entry.replacement_note() for entry in get_registry().replacements()]
    for note in notes:
        err_console.print(f"[bold yellow]warning:[/] {escape(note)}", highlight=False, soft_wrap=True)
    return notes
