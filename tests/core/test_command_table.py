"""The command table: checked when the CLI is imported, every row mounted, one --overwrite spelled two ways."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from alilama_core.app import cli
from alilama_core.app.cli import COMMANDS, CommandTableError, get_app, resolve


def _help(*args: str) -> str:
    result = CliRunner().invoke(get_app(), [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_row_of_the_table_is_a_command_of_the_app():
    mounted = {info.name for info in cli.app.registered_commands} | {info.name for info in cli.app.registered_groups}
    assert {name for name, _ in COMMANDS} <= mounted
    assert {"export", "push", "chat", "serve", "generate"} <= mounted
    assert len({name for name, _ in COMMANDS}) == len(COMMANDS)
    out = _help()
    assert all(name in out for name in ("train", "generate", "chat", "serve", "plugins", "model", "tasks"))


def test_the_table_carries_each_commands_examples_and_settings():
    assert "alilama chat runs/essay" in _help("chat")
    assert "alilama serve runs/essay --port 8080" in _help("serve")
    assert "train.max_steps = " in _help("train")  # add_config_help, after the loop
    train = next(info for info in cli.app.registered_commands if info.name == "train")
    assert train.context_settings == {"ignore_unknown_options": True}


def _nameless():
    pass


@pytest.mark.parametrize(
    "table, phrase",
    [
        ([("train", "alilama_core.app.commands:train_cmd")] * 2, "'train': named twice"),
        ([("train", "alilama_core.app.commands")], "is not 'module:attribute'"),
        ([("train", "alilama_core.app.commands:no_such_cmd")], "has no attribute 'no_such_cmd'"),
        ([("ghost", "no_such_module_anywhere:app")], "module no_such_module_anywhere does not import"),
        ([("table", "alilama_core.app.cli:COMMANDS")], "neither a typer.Typer (a group) nor a command function"),
        ([("nameless", f"{__name__}:_nameless")], "a function without a docstring"),
        ([("Train", "alilama_core.app.commands:train_cmd")], "lowercase words joined by '-'"),
    ],
)
def test_a_wrong_table_is_refused_with_every_wrong_row_named(table, phrase):
    with pytest.raises(CommandTableError) as caught:
        resolve(table)
    message = str(caught.value)
    assert "alilama_core.app.cli.COMMANDS" in message and phrase in message, message


def test_all_wrong_rows_are_named_at_once_and_a_group_needs_help(monkeypatch):
    module = types.ModuleType("table_test_commands")
    module.helpless = typer.Typer()
    monkeypatch.setitem(sys.modules, "table_test_commands", module)
    with pytest.raises(CommandTableError) as caught:
        resolve([("a", "table_test_commands:helpless"), ("b", "table_test_commands:missing")])
    message = str(caught.value)
    assert "'a': table_test_commands:helpless is a typer.Typer without help" in message
    assert "'b': module table_test_commands has no attribute 'missing'" in message


def test_a_wrong_table_fails_when_the_cli_is_imported():
    """The module itself refuses to load with a wrong table: no app is ever built from it."""
    source = Path(cli.__file__).read_text(encoding="utf-8")
    row = '("chat", "alilama_core.app.chat:chat_cmd"),'
    assert row in source
    broken = source.replace(row, row + '\n    ("chat", "alilama_core.app.generate:generate_cmd"),')
    module = types.ModuleType("alilama_core.app.cli_broken")
    with pytest.raises(Exception, match="'chat': named twice") as caught:
        exec(compile(broken, cli.__file__, "exec"), module.__dict__)
    assert type(caught.value).__name__ == "CommandTableError"  # the copy's own class
    assert "app" not in module.__dict__


def test_overwrite_and_force_are_one_option(tmp_path):
    """``data prepare`` refuses an existing output, and replaces it with --overwrite or its alias --force."""
    runner = CliRunner()
    app = get_app()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Once upon a time there was a cat.\n<|endoftext|>\nThe cat sat on a mat.\n" * 20)
    tok = tmp_path / "tok"
    trained = runner.invoke(app, ["tokenizer", "train", "-i", str(corpus), "-v", "270", "-o", str(tok)])
    assert trained.exit_code == 0, trained.output
    prepare = ["data", "prepare", "-i", str(corpus), "--tokenizer", str(tok), "-o", str(tmp_path / "data")]
    assert runner.invoke(app, [*prepare, "--no-progress"]).exit_code == 0
    again = runner.invoke(app, [*prepare, "--no-progress"])
    assert again.exit_code == 1 and "--overwrite" in again.output, again.output
    for flag in ("--overwrite", "--force"):
        result = runner.invoke(app, [*prepare, "--no-progress", flag])
        assert result.exit_code == 0, (flag, result.output)
    for command in (["data", "prepare"], ["train"], ["viz", "attention"]):
        out = _help(*command)
        assert "--overwrite" in out and "--force" in out, command
