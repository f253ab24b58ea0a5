"""`alilama train` ends by building the run's compiled decode step, and `load_run` finds it: the paths around
the build, on this process's tiny run, without a compile (the compiler's answer is replaced by a refusal or by
the uncompiled step). The build itself, and the tokens on it, are in test_eval_generate_cli.py (slow tier).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from alilama_testing import TINY_TRAIN

from alilama_core.app.cli import get_app
from alilama_core.engine import decode as dec
from alilama_core.runs import compiled
from alilama_core.runs.checkpoint import load_run

TRAIN = ["train", *TINY_TRAIN, "train.max_steps=2"]


def cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(get_app(), list(args), env=env, catch_exceptions=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("build-decode")
    write_corpus(root / "corpus.txt", 100, seed=1)
    for args in (
        ["tokenizer", "train", "--input", str(root / "corpus.txt"), "--vocab-size", "300", "--out", str(root / "tok")],
        ["data", "prepare", "--input", str(root / "corpus.txt"), "--tokenizer", str(root / "tok")]
        + ["--out", str(root / "data"), "--val-fraction", "0.1"],
    ):
        assert cli(*args).exit_code == 0
    return root / "data"


def refused(monkeypatch, reason: str = "no C++ compiler (g++, clang++ or c++) on PATH") -> list:
    """The compiler's answer, replaced by ``reason``; the models it was asked for, in order."""
    asked = []

    def step(model, build=True):
        asked.append((model, build))
        return None, reason

    monkeypatch.setattr(compiled, "compiled_step", step)
    return asked


def test_train_ends_by_building_the_step_and_says_why_not_when_it_cannot(data, tmp_path, monkeypatch):
    asked = refused(monkeypatch)
    result = cli(*TRAIN, "--data", str(data), "--out", str(tmp_path / "run"), "--build-decode")
    assert result.exit_code == 0, result.output
    assert "decode: building the run's compiled decode step" in result.stderr
    assert "decode: no compiled step, generate decodes eagerly (no C++ compiler" in result.stderr
    assert len(asked) == 1 and asked[0][1] is True  # one build, of the finished run's model


@pytest.mark.parametrize(
    "how, env",
    [("--no-build-decode", None), ("", {"ALILAMA_BUILD_DECODE": "0"}), ("", {"ALILAMA_BUILD_DECODE": "false"})],
    ids=["flag", "env-0", "env-false"],
)
def test_no_build_decode_skips_it(data, tmp_path, monkeypatch, how, env):
    asked = refused(monkeypatch)
    result = cli(*TRAIN, "--data", str(data), "--out", str(tmp_path / "run"), *filter(None, [how]), env=env)
    assert result.exit_code == 0, result.output
    assert asked == [] and "decode:" not in result.stderr


def test_a_stopped_run_is_not_built(data, tmp_path, monkeypatch):
    asked = refused(monkeypatch)
    result = cli(*TRAIN, "--data", str(data), "--out", str(tmp_path / "run"), "--stop-at", "1", "--build-decode")
    assert result.exit_code == 130, result.output  # stopped before the end, as --stop-at says
    assert asked == []  # the step is built for the final weights, which a stopped run does not have yet


def test_a_bad_env_value_is_refused_by_name(data, tmp_path):
    result = cli(
        *TRAIN,
        "--data",
        str(data),
        "--out",
        str(tmp_path / "run"),
        env={"ALILAMA_BUILD_DECODE": "maybe", "COLUMNS": "300"},
    )
    assert result.exit_code == 2 and "--build-decode" in result.output
    assert "ALILAMA_BUILD_DECODE" in result.output and "valid boolean" in result.output
    assert not (tmp_path / "run").exists()


def test_load_run_keeps_the_runs_packages_in_its_folder(data, tmp_path, monkeypatch):
    """``load_run`` attaches RUN/compiled: a step built there is what ``decode="auto"`` finds, from Python."""
    assert cli(*TRAIN, "--data", str(data), "--out", str(tmp_path / "run"), "--no-build-decode").exit_code == 0
    run = load_run(tmp_path / "run")
    plan = dec.decode_plan(run.model)
    assert plan.path == "eager" and plan.reason.startswith(dec.NOT_BUILT)
    # the uncompiled step, built "into" the run's folder: the package store is the run's
    monkeypatch.setattr(dec, "build_package", lambda model, path: Path(path).write_bytes(b"step"))
    monkeypatch.setattr(dec, "_load", lambda path: dec.DecodeStep(run.model))
    seconds, reason = compiled.prepare(run)
    assert reason is None
    (package,) = (tmp_path / "run" / compiled.FOLDER).glob("decode-*.pt2")
    again = load_run(tmp_path / "run")  # a new process's view: found in the folder, not built
    monkeypatch.setattr(dec, "build_package", lambda model, path: pytest.fail("built again"))
    dec._LOADED.clear()
    assert dec.decode_plan(again.model).path == "compiled" and package.is_file()
