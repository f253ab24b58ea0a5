"""The ``alilama`` command line: one table of commands (``COMMANDS``), built into one typer app.

Each row names a command or a group and where it lives, as ``module:attribute``:
a ``typer.Typer`` is mounted as a group (one sub-app per noun), a function as a
command, with the examples and settings it carries (``common.examples``). The
table is checked when this module is imported (``resolve``): a name given
twice, a target that does not import, or one that is neither a ``typer.Typer``
nor a function with a docstring (its help) is a ``CommandTableError`` listing
every wrong row. Third-party plugins add their commands afterwards, through the
``register_commands`` hook (``get_app``, ``main``).

The command modules keep heavy imports (torch, starlette) inside their
commands, so importing the table keeps ``alilama --help`` fast. Errors that
Alilama raises on purpose are printed as one clear line and exit 1.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable

import typer

from alilama_core.app.common import _Group, add_config_help, help_examples

COMMANDS: tuple[tuple[str, str], ...] = (
    ("quickstart", "alilama_core.app.commands:quickstart_cmd"),
    ("data", "alilama_core.app.commands:data_app"),
    ("tokenizer", "alilama_core.app.tokenizer:tokenizer_app"),
    ("train", "alilama_core.app.commands:train_cmd"),
    ("sweep", "alilama_core.app.sweep:sweep_cmd"),
    ("eval", "alilama_core.app.commands:eval_cmd"),
    ("plot", "alilama_core.app.commands:plot_cmd"),
    ("generate", "alilama_core.app.generate:generate_cmd"),
    ("chat", "alilama_core.app.chat:chat_cmd"),
    ("serve", "alilama_core.app.serve_cmd:serve_cmd"),
    ("viz", "alilama_core.app.viz:viz_app"),
    ("tasks", "alilama_core.app.tasks:tasks_app"),
    ("model", "alilama_core.app.model:model_app"),
    ("export", "alilama_core.app.export:export_app"),
    ("push", "alilama_core.app.export:push_cmd"),
    ("plugins", "alilama_core.app.plugins:plugins_cmd"),
)
"""Every built-in command and group: ``(name, "module:attribute")``, in the order ``alilama --help`` lists them."""

CONFIG_HELP = ("train",)
"""Commands whose ``--help`` ends with every config field and its default (``common.add_config_help``)."""

_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")


class CommandTableError(Exception):
    """The command table is wrong: a name given twice, or a target that is not a command or a group."""


def resolve(table: Iterable[tuple[str, str]]) -> list[tuple[str, object]]:
    """Each row's name and its target, imported; ``CommandTableError`` naming every wrong row."""
    problems: list[str] = []
    resolved: list[tuple[str, object]] = []
    seen: set[str] = set()
    for row in table:
        if not (isinstance(row, tuple) and len(row) == 2 and all(isinstance(part, str) for part in row)):
            problems.append(f"{row!r}: a row is (name, 'module:attribute')")
            continue
        name, target = row
        if not _NAME.fullmatch(name):
            problems.append(f"{name!r}: a command name is lowercase words joined by '-'")
        if name in seen:
            problems.append(f"{name!r}: named twice (each command is one row)")
        seen.add(name)
        module_name, _, attribute = target.partition(":")
        if not module_name or not attribute:
            problems.append(f"{name!r}: target {target!r} is not 'module:attribute'")
            continue
        try:
            target_obj = getattr(importlib.import_module(module_name), attribute)
        except AttributeError:
            problems.append(f"{name!r}: module {module_name} has no attribute {attribute!r}")
            continue
        except Exception as exc:  # the module itself does not import
            problems.append(f"{name!r}: module {module_name} does not import ({type(exc).__name__}: {exc})")
            continue
        why = _not_a_command(target_obj)
        if why:
            problems.append(f"{name!r}: {target} {why}")
            continue
        resolved.append((name, target_obj))
    if problems:
        raise CommandTableError(
            "the command table (alilama_core.app.cli.COMMANDS) is wrong:\n  " + "\n  ".join(problems)
        )
    return resolved


def _not_a_command(target: object) -> str:
    """Why ``target`` cannot be mounted ('' when it can)."""
    if isinstance(target, typer.Typer):
        callback = target.registered_callback.callback if target.registered_callback else None
        if not (target.info.help or (callback is not None and inspect.getdoc(callback))):
            return "is a typer.Typer without help (give typer.Typer(help=...))"
        return ""
    if inspect.isfunction(target):
        return "" if inspect.getdoc(target) else "is a function without a docstring (its --help text)"
    return f"is a {type(target).__name__}, neither a typer.Typer (a group) nor a command function"


def build(app: typer.Typer, table: Iterable[tuple[str, str]]) -> typer.Typer:
    """Mount every row of ``table`` on ``app`` (checked first by ``resolve``); ``app``."""
    for name, target in resolve(table):
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name, **getattr(target, "command_settings", {}))(target)
    add_config_help(app, *CONFIG_HELP)
    return app


app = build(
    typer.Typer(
        cls=_Group,
        name="alilama",
        help="Train, study and share small GPT-style language models.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        epilog=help_examples(
            "alilama quickstart",
            "alilama train --config configs/essay.yaml --data data/ --out runs/essay",
            'alilama generate runs/essay --prompt "Once upon a time"',
        ),
    ),
    COMMANDS,
)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    get_app()(args=argv)


def get_app() -> typer.Typer:
    """The app with plugin commands added after the table's (for ``typer.testing.CliRunner``)."""
    from alilama_core.engine.registry import get_registry

    get_registry().add_commands(app)
    return app
