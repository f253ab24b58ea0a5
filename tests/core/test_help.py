"""Help that teaches: ``alilama train --help`` lists every config field with its default, and every option has help."""

from __future__ import annotations

import dataclasses

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


def _walk(command, path: tuple[str, ...] = ()):
    """Every command and group under ``command`` (typer vendors its own click: duck-typed)."""
    yield path, command
    if isinstance(getattr(command, "commands", None), dict):
        for name, sub in command.commands.items():
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
