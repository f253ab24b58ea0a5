"""Help that teaches: ``alilama train --help`` lists every config field with its default, and every option has help."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from typer.testing import CliRunner

from alilama_core.app.cli import get_app
from alilama_core.app.common import _yaml_value, config_fields, field_docs
from alilama_core.contracts.config import Config, ModelConfig, TrainConfig
from alilama_core.engine.configs import PRESETS


def _help(*args: str) -> str:
    result = CliRunner().invoke(get_app(), [*args, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    return result.output


def _squash(text: str) -> str:
    """The help's words on one line (rich may wrap long lines)."""
    return " ".join(text.replace("│", " ").split())


def test_train_help_lists_every_field_with_its_default():
    out = _squash(_help("train"))
    for section in dataclasses.fields(Config):
        cls = section.default_factory
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert f"{section.name}.{f.name} = {_yaml_value(default)}" in out, (section.name, f.name)
    # spelled out, so that the formatting itself is checked too
    for line in ("model.d_model = 128", "model.init_std = null", "train.lr = 0.003", 'task.name = ""'):
        assert line in out
    for name in PRESETS:
        assert f"{name}:" in out


def test_train_help_shows_the_field_docs():
    out = _squash(_help("train"))
    for name, doc in field_docs(TrainConfig).items():
        assert doc in out, name
    assert "Biases in the linear layers." in out
    assert field_docs(ModelConfig)["bias"] == "Biases in the linear layers."


def test_config_fields_cover_every_dataclass_field():
    names = {name for name, *_ in config_fields()}
    expected = {f"{s.name}.{f.name}" for s in dataclasses.fields(Config) for f in dataclasses.fields(s.default_factory)}
    assert names == expected


def test_model_info_help_lists_the_fields_too():
    out = _squash(_help("model", "info"))
    assert "model.n_layers = 8" in out and "train.max_steps = 2000" in out


def _subcommands(command) -> dict:
    """A group's sub-commands as click lists them (a group may build them when asked: `export`'s formats)."""
    if not hasattr(command, "list_commands"):
        return {}
    ctx = command.context_class(command)
    return {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}


def _walk(command, path: tuple[str, ...] = ()):
    """Every command and group under ``command`` (typer vendors its own click: duck-typed)."""
    yield path, command
    for name, sub in _subcommands(command).items():
        yield from _walk(sub, (*path, name))


def _options_without_help() -> list[str]:
    missing = []
    for path, command in _walk(typer.main.get_command(get_app())):
        for param in command.params:
            if param.param_type_name == "option" and not (param.help or "").strip() and "--help" not in param.opts:
                missing.append(f"alilama {' '.join(path)} {'/'.join(param.opts)}")
    return missing


def test_every_option_has_help():
    assert _options_without_help() == []


def test_the_walk_sees_the_command_tree():
    paths = {" ".join(path) for path, _ in _walk(typer.main.get_command(get_app()))}
    assert {"train", "generate", "model info", "tokenizer train", "viz attention", "tasks list"} <= paths


def test_every_command_has_help():
    for path, command in _walk(typer.main.get_command(get_app())):
        if path:
            assert (command.help or command.short_help or "").strip(), " ".join(path)


def test_train_help_stays_light():
    """The generated help reads the dataclasses and presets only: no torch."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom alilama_core.app.cli import main\ntry:\n    main(['train', '--help'])\n"
        "except SystemExit:\n    pass\nprint('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "model.d_model = 128" in out.stdout, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr


# -- every command's help shows examples that parse ---------------------------------------------------

# typer vendors its own click in recent releases: its UsageError is BadParameter's base class either way.
USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
SHELL_OPERATORS = {">", ">>", "<", "|", "&&", ";"}


def _examples(path: tuple[str, ...], columns: int) -> list[str]:
    """The example lines ``alilama PATH --help`` prints under ``Examples:`` at this terminal width."""
    from unittest import mock

    import typer.rich_utils

    # typer reads TERMINAL_WIDTH once, when it first formats help (in this process: any test's): set it here
    with mock.patch.object(typer.rich_utils, "MAX_WIDTH", columns):
        out = CliRunner().invoke(get_app(), [*path, "--help"], env={"COLUMNS": str(columns)})
    assert out.exit_code == 0, out.output
    lines = [line.replace("│", " ").strip() for line in out.output.splitlines()]
    if "Examples:" not in lines:
        return []
    found = []
    for line in lines[lines.index("Examples:") + 1 :]:
        if not line.startswith("alilama "):
            break
        found.append(line)
    return found


def _parse(root, line: str) -> str | None:
    """Parse an example as the shell and click would, without running it; ``None``, or what is wrong."""
    import shlex

    words = shlex.split(line, posix=True)[1:]
    for i, word in enumerate(words):
        if word in SHELL_OPERATORS:  # `alilama eval ... --json > essay.json`: the shell's, not alilama's
            words = words[:i]
            break
    command, names = root, []
    while hasattr(command, "list_commands") and words and words[0] in _subcommands(command):
        names.append(words[0])
        command = _subcommands(command)[words.pop(0)]
    if hasattr(command, "list_commands"):
        return f"names no command: {' '.join(names) or 'alilama'} has no sub-command {words[:1]}"
    try:
        ctx = command.make_context(" ".join(["alilama", *names]), words, resilient_parsing=False)
    except USAGE_ERROR as exc:
        return f"does not parse: {exc.format_message()}"
    return _config_problem(ctx.params)


def _config_problem(params: dict) -> str | None:
    """A preset or an override that does not exist (click cannot know: they are free text)."""
    known = {name for name, *_ in config_fields()}
    if params.get("preset") is not None and params["preset"] not in PRESETS:
        return f"no preset {params['preset']!r}"
    for override in params.get("overrides") or []:
        key = override.lstrip("-").partition("=")[0]
        if key not in known:
            return f"no config field {key!r}"
    return None


@pytest.mark.slow  # parses every command's every example
def test_every_command_shows_examples_that_parse():
    root = typer.main.get_command(get_app())
    problems = []
    for path, _ in _walk(root):
        shown = _examples(path, 400)
        if not shown:
            problems.append(f"alilama {' '.join(path)} --help shows no example")
        for line in shown:
            problem = _parse(root, line)
            if problem:
                problems.append(f"{line!r} {problem}")
    assert problems == []


@pytest.mark.slow  # renders every command's help
def test_examples_print_whole_in_an_80_column_terminal():
    """Each example on a line of its own, copyable: none wraps at 80 columns."""
    for path, _ in _walk(typer.main.get_command(get_app())):
        assert _examples(path, 80) == _examples(path, 400), " ".join(path)


def test_a_wrong_example_is_caught():
    root = typer.main.get_command(get_app())
    assert _parse(root, "alilama data prepare --input corpus.txt --tokenizer tok/ --out data/") is None
    assert "does not parse" in _parse(root, "alilama data prepare --inptu corpus.txt --tokenizer tok/ --out data/")
    assert "does not parse" in _parse(root, "alilama data prepare --input corpus.txt")  # --out is required
    assert "names no command" in _parse(root, "alilama tasks lsit")
    assert "no preset" in _parse(root, "alilama model info --preset huge")
    assert "no config field" in _parse(root, "alilama train --preset tiny --data data/ --out r model.layers=4")
    assert _parse(root, "alilama eval runs/essay --data valid.txt --json > essay.json") is None


def test_train_help_shows_examples_before_the_config_fields():
    out = _help("train")
    assert out.index("Examples:") < out.index("Presets (--preset NAME")
    assert out.count("Config fields") == 1
    assert _help("train").count("Config fields") == 1  # shown twice, built once
