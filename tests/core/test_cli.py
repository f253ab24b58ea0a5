from __future__ import annotations

import json
import os
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
    for kind, name in [
        ("positional", "alibi"),
        ("positional", "rope"),
        ("positional", "learned"),
        ("positional", "nope"),
        ("attention", "eager"),
        ("attention", "sdpa"),
        ("attention", "flex"),
        ("attention", "flash"),
    ]:
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
    assert "unknown attention 'nosuch'; available: auto, " in result.output
    assert all(name in result.output for name in ("eager", "flash", "flex", "sdpa", "tiled"))
    assert "Traceback" not in result.output
    both = runner.invoke(get_app(), ["model", "info", "--preset", "tiny", "--config", "x.yaml"])
    assert both.exit_code == 1 and "either --config or --preset" in both.output


def test_help_does_not_import_torch():
    code = "import sys; from alilama_core.app.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr
    assert time.perf_counter() - start < 30  # generous: a sanity bound, not a benchmark


def test_tokenizer_commands_live_in_the_app_and_take_a_kind(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 40, encoding="utf-8")
    app = get_app()
    r = runner.invoke(
        app, ["tokenizer", "train", "-i", str(corpus), "-v", "300", "-o", str(tmp_path / "t"), "--kind", "no-such-kind"]
    )
    assert r.exit_code == 1 and "unknown tokenizer 'no-such-kind'" in r.output and "bpe" in r.output
    r = runner.invoke(app, ["tokenizer", "train", "-i", str(corpus), "-v", "300", "-o", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "t" / "alilama_tokenizer.json").read_text()) == {"kind": "bpe"}
    r = runner.invoke(app, ["tokenizer", "info", "-t", str(tmp_path / "t"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["kind"] == "bpe"


def test_tokenizer_train_validates_before_training(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 40, encoding="utf-8")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = [
        (["-v", "300", "-o", str(a_file)], "is a file"),
        (["-v", "300", "-o", str(a_file / "sub")], "is a file"),
        *([(["-v", "300", "-o", str(locked / "tok")], "not writable")] if os.geteuid() != 0 else []),
        (["-v", "10000000000", "-o", str(tmp_path / "t")], "--vocab-size must be between"),
        (["-v", "300", "-o", str(tmp_path / "t"), "--no-special", "--special", "<|x|>"], "not both"),
        (["-v", "300", "-o", str(tmp_path / "t"), "--option", "pattern"], "key=value"),
        (["-v", "300", "-o", str(tmp_path / "t"), "--option", "merges=3"], "'merges'"),
    ]
    try:
        for args, phrase in cases:
            r = runner.invoke(get_app(), ["tokenizer", "train", "-i", str(corpus), *args])
            assert r.exit_code == 1 and phrase in r.output, (args, r.output)
            assert "Traceback" not in r.output
    finally:
        locked.chmod(0o700)
    assert not (tmp_path / "t").exists()


def test_decode_reads_ids_safely(tmp_path):
    import numpy as np

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 40, encoding="utf-8")
    app = get_app()
    assert (
        runner.invoke(app, ["tokenizer", "train", "-i", str(corpus), "-v", "270", "-o", str(tmp_path / "t")]).exit_code
        == 0
    )
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not an npy file")
    floats = tmp_path / "floats.npy"
    np.save(floats, np.array([1.5, 2.5]))
    for path, phrase in [(bad, "cannot read ids"), (floats, "integer array")]:
        r = runner.invoke(app, ["tokenizer", "decode", "-t", str(tmp_path / "t"), "--input", str(path)])
        assert r.exit_code == 1 and phrase in r.output, r.output
    r = runner.invoke(app, ["tokenizer", "decode", "-t", str(tmp_path / "t"), "99999"])
    assert r.exit_code == 1 and "outside the vocabulary" in r.output


def test_the_library_exports_the_documented_api():
    import alilama_core

    for name in ("load_run", "build_model", "generate", "generate_text", "evaluate_run", "SamplingSettings"):
        assert name in alilama_core.__all__ and getattr(alilama_core, name) is not None
    code = (
        "import sys, alilama_core.runs.checkpoint, alilama_core.contracts.config, alilama_core.engine.registry; "
        "print([m for m in sys.modules if m.startswith('alilama_core.app') or m == 'typer'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_version_is_defined_once():
    from importlib import metadata

    import alilama_core

    assert alilama_core.__version__ == metadata.version("alilama")
    assert '__version__ = "' not in (alilama_core.__file__ and open(alilama_core.__file__).read())
