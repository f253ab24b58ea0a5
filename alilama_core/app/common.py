"""What every command module shares: consoles, the error-printing group, option aliases, config resolution."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Annotated, Optional

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from alilama_core.base.errors import AlilamaError
from alilama_core.engine.configs import PRESETS, resolve_config  # noqa: F401 - the commands import it from here

# Outside a terminal (a log file, a pipe, CI) lines are never wrapped at 80 columns: one message, one line.
console = Console(soft_wrap=not sys.stdout.isatty())
err_console = Console(stderr=True, soft_wrap=not sys.stderr.isatty())


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
        from alilama_core.base.files import disk_full_message, disk_full_reason

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
PresetOpt = Annotated[Optional[str], typer.Option("--preset", "-p", help=f"Named preset: {', '.join(PRESETS)}.")]
OverridesArg = Annotated[
    Optional[list[str]],
    typer.Argument(help="Overrides as section.field=value, e.g. model.n_layers=4 model.positional=rope."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
CheckpointOpt = Annotated[
    Optional[str],
    typer.Option("--checkpoint", help="Checkpoint folder name, e.g. step-00001000 (default: final, else the latest)."),
]
OverwriteOpt = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        "--force",  # the export commands' old spelling, kept for one release: scripts may use it
        help="Replace what Alilama wrote at the output before (never anything else).",
    ),
]
ProgressOpt = Annotated[
    bool,
    typer.Option(
        "--progress/--no-progress",
        help="A progress bar in a terminal (--no-progress, or outside a terminal: a line per step).",
    ),
]
RunArg = Annotated[str, typer.Argument(help="Run folder (uses RUN/final, else the latest checkpoint).")]
ForceAttentionOpt = Annotated[
    bool,
    typer.Option(
        "--force-attention",
        help="Run a run trained with non-exact attention (e.g. a sliding window) with another --attention "
        "anyway (or an exact run with a non-exact one); its results are then not the model's own.",
    ),
]


def plain_line(text: str) -> None:
    """One line on stderr as written: no markup, no highlighting, never wrapped (logs and pipes read it whole)."""
    err_console.print(text, highlight=False, markup=False, soft_wrap=True)


def show_bar(progress: bool) -> bool:
    """Whether to draw a rich progress bar: ``--progress`` (the default) and stderr is a terminal."""
    return progress and err_console.is_terminal


class StepProgress:
    """Progress through a known number of steps on stderr: a rich bar in a terminal, else a line per step.

    ``show(number, text)`` says that step ``number`` (from 1) is under way, ``show(number, text, done=True)``
    that it is finished; without a bar (``bar=False``: ``--no-progress``, or stderr is not a terminal) each
    call prints ``NAME number/total: text``. Use it as a context manager (the bar is removed at the end).
    """

    def __init__(self, name: str, total: int, bar: bool = True) -> None:
        self.name, self.total = name, total
        self._bar = self._task = None
        if show_bar(bar):
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console,
                transient=True,
            )

    def __enter__(self) -> StepProgress:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def next_done(self):
        """A callback ``on_step(text)`` that marks the next step (1, 2, ...) finished with ``text``."""
        import itertools

        number = itertools.count(1)
        return lambda text: self.show(next(number), text, done=True)

    def show(self, number: int, text: str, done: bool = False) -> None:
        if self._bar is None:
            plain_line(f"{self.name} {number}/{self.total}: {text}")
        else:
            completed = number if done else number - 1
            self._bar.update(self._task, completed=completed, description=f"{self.name}: {escape(text)}")


@contextmanager
def loud_warnings():
    """Print Alilama's warnings raised inside the block as ``warning:`` lines on stderr (others pass on)."""
    import warnings

    from alilama_core.base.errors import AlilamaWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AlilamaWarning)
        yield
    for w in caught:
        if issubclass(w.category, AlilamaWarning):
            err_console.print(f"[bold yellow]warning:[/] {escape(str(w.message))}", highlight=False, soft_wrap=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


LogOpt = Annotated[
    bool,
    typer.Option(
        "--log",
        help="Also log the results into the run's trackers (its train.loggers: TensorBoard, W&B, MLflow, CSV), "
        "at the evaluated checkpoint's step.",
    ),
]


def log_eval_results(run, checkpoint, results: dict[str, float]) -> None:
    """``eval --log``: add ``results`` to the run's trackers and say which took them (on stderr)."""
    from alilama_core.runs.trackers import log_to_run_trackers

    with loud_warnings():
        names = log_to_run_trackers(run, checkpoint, results)
    if names:
        err_console.print(f"logged {len(results)} results to {', '.join(names)}", highlight=False, soft_wrap=True)
    else:
        err_console.print(
            "note: --log: the run has no loggers (train.loggers), so only the output above has the results",
            highlight=False,
            soft_wrap=True,
        )


def warn_replacements() -> list[str]:
    """Print a ``warning:`` line on stderr for every registered name a plugin took over; the lines."""
    from alilama_core.engine.registry import get_registry

    notes = [entry.replacement_note() for entry in get_registry().replacements()]
    for note in notes:
        err_console.print(f"[bold yellow]warning:[/] {escape(note)}", highlight=False, soft_wrap=True)
    return notes


# -- help that teaches: examples, and every config field with its default ------------------------------


def help_examples(*lines: str) -> str:
    """A command's epilog: its example command lines under ``Examples:``, one per line.

    The ``\\b`` line keeps click's plain formatter from joining the lines (rich drops it). Keep each line
    to 75 characters, to print whole in an 80-column terminal: tests/core/test_help.py checks that every command
    has examples, that they print on one line each, and that they parse.
    """
    return "\b\nExamples:\n" + "\n".join(f"  {escape(line)}" for line in lines)


def examples(*lines: str, **settings):
    """Mark a command function with its ``--help`` examples (``help_examples``) and typer's command ``settings``
    (``context_settings``, ``cls``): the command table (``alilama_core.app.cli.COMMANDS``) mounts it with them.

    It registers nothing: a command exists only by its row in the table.
    """

    def mark(fn):
        fn.command_settings = {**settings, "epilog": help_examples(*lines)}
        return fn

    return mark


def _yaml_value(value) -> str:
    """A default as an override would spell it (``section.field=VALUE`` is read as YAML)."""
    import json

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)


def field_docs(cls: type) -> dict[str, str]:
    """The one-line docs of a dataclass's fields: the string literal right after each field in the class body."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):  # no source (a frozen app): names and defaults only
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for stmt, after in zip(body, body[1:]):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            text = inspect.cleandoc(after.value.value)
            first = text.split("\n\n")[0]  # the first paragraph, on one line
            docs[stmt.target.id] = " ".join(first.replace("``", "").split())
    return docs


def config_fields() -> list[tuple[str, str, str, str]]:
    """``(section.field, default, type, doc)`` for every field of every config section, in class order."""
    import dataclasses

    from alilama_core.contracts.config import Config

    rows = []
    for section in dataclasses.fields(Config):
        cls = section.default_factory  # ModelConfig, TrainConfig, TaskConfig
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = None
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            rows.append((f"{section.name}.{f.name}", _yaml_value(default), kind, docs.get(f.name, "")))
    return rows


def config_help() -> str:
    """The epilog of the commands that take a config: presets and every field with its default (never drifts)."""
    from alilama_core.engine.configs import PRESETS

    def overrides(spec: dict) -> str:
        pairs = [f"{s}.{k}={_yaml_value(v)}" for s, fields in spec.items() for k, v in fields.items()]
        return " ".join(pairs) if pairs else "the defaults below"

    lines = ["Presets (--preset NAME; default essay), each the defaults below plus:"]
    lines += [f"  {name}: {overrides(spec)}" for name, spec in PRESETS.items()]
    lines.append("")
    lines.append("Config fields (override with section.field=value; the value is read as YAML):")
    import dataclasses

    from alilama_core.contracts.config import Config

    about = {f.name: (f.default_factory.__doc__ or "").strip().split("\n")[0] for f in dataclasses.fields(Config)}
    section = None
    for name, default, kind, doc in config_fields():
        if name.split(".")[0] != section:
            section = name.split(".")[0]
            lines.append(f"{section}.*: {about.get(section, '')}".rstrip())
        lines.append(f"  {name} = {default}  ({kind})")
        if doc:
            lines.append(f"      {doc}")
    return escape("\n".join(lines))


class ConfigHelpCommand(TyperCommand):
    """A command whose ``--help`` ends with ``config_help()`` (after its examples), built only when help is shown."""

    def format_help(self, ctx, formatter):
        if not getattr(self, "_config_help_added", False):
            self.epilog = "\n\n".join(part for part in (self.epilog, config_help()) if part)
            self._config_help_added = True
        return super().format_help(ctx, formatter)


def add_config_help(app: typer.Typer, *names: str) -> None:
    """Give the registered commands ``names`` of ``app`` the generated config epilog (see ``config_help``)."""
    for info in app.registered_commands:
        name = info.name or (info.callback.__name__ if info.callback else None)
        if name in names and info.cls in (None, TyperCommand):
            info.cls = ConfigHelpCommand
