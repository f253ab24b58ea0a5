from __future__ import annotations

import json
import subprocess
import sys
import time

from typer.testing import CliRunner

from alilama_core.app.cli import get_app

runner = CliRunner()


def test_plugins_json_lists_builtins_with_availability():
    result = runner.invoke(get_app(), ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    rows = {(r["kind"], r["name"]): r for r in json.loads(result.stdout)["registered"]}
    for kind, name in [("positional", "alibi"), ("positional", "rope"), ("positional", "learned"),
                       ("positional", "nope"), ("attention", "eager"), ("attention", "sdpa"),
                       ("attention", "flex"), ("attention", "flash")]:
        assert rows[(kind, name)]["distribution"] == "alilama"
    assert rows[("attention", "sdpa")]["available"] is True
    flash = rows[("attention", "flash")]
    import torch

    if not torch.cuda.is_available():
        assert flash["available"] is False and "CUDA" in flash["reason"] or "flash-attn" in flash["reason"]


def test_model_info_prints_parameters_plugins_and_bias_memory():
    result = runner.invoke(get_app(), ["model", "info", "--preset", "essay"])
    assert result.exit_code == 0, result.output
    assert "2,110,720" in result.stdout
    assert "positional: alibi" in result.stdout and "attention: sdpa" in result.stdout
    assert "bias memory" in result.stdout


def test_model_info_json_with_overrides():
    result = runner.invoke(get_app(), ["model", "info", "--preset", "tiny", "model.positional=rope", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["plugins"]["positional"]["name"] == "rope"
    assert report["parameters"] == sum(r["numel"] for r in report["table"])


def test_cli_errors_are_one_clear_line():
    result = runner.invoke(get_app(), ["model", "info", "model.attention=nosuch"])
    assert result.exit_code == 1
    assert "unknown attention 'nosuch'; available: auto, eager, flash, flex, sdpa, tiled" in result.output
    assert "Traceback" not in result.output
    both = runner.invoke(get_app(), ["model", "info", "--preset", "tiny", "--config", "x.yaml"])
    assert both.exit_code == 1 and "either --config or --preset" in both.output


def test_help_does_not_import_torch():
    code = "import sys; from alilama_core.app.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr
    assert time.perf_counter() - start < 30  # generous: a sanity bound, not a benchmark
