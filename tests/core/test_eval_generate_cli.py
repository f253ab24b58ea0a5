"""`alilama generate`, `eval` and `viz attention`: what they loaded, --device, --threads, --num-samples, progress.

One tiny run is trained once for the module; the commands run in this process through typer's
``CliRunner`` (stdout and stderr apart), so what goes where is checked too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from alilama_testing import TINY_TRAIN

from alilama_core.app.cli import get_app

TINY = [*TINY_TRAIN, "train.max_steps=4"]


def cli(*args: str):
    return CliRunner().invoke(get_app(), list(args), catch_exceptions=True)


def passed(result) -> None:
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("evalgen")
    write_corpus(root / "corpus.txt", 200, seed=3)
    tok = ["--vocab-size", "300", "--special", "<|endoftext|>"]
    for args in (
        ["tokenizer", "train", "--input", str(root / "corpus.txt"), *tok, "--out", str(root / "tok")],
        ["data", "prepare", "--input", str(root / "corpus.txt"), "--tokenizer", str(root / "tok")]
        + ["--out", str(root / "data"), "--val-fraction", "0.1"],
        ["train", *TINY, "--data", str(root / "data"), "--out", str(root / "run")],
    ):
        passed(cli(*args))
    return root


def gen(ws: Path, *args: str):
    return cli("generate", str(ws / "run"), "--prompt", "Once", "-n", "8", "--device", "cpu", *args)


def test_generate_names_the_checkpoint_and_the_backend(ws):
    result = gen(ws, "--seed", "0")
    passed(result)
    assert "checkpoint final" in result.stderr
    assert "attention: auto (chooses on cpu:" in result.stderr  # auto says what it picks
    assert "decode:" in result.stderr
    assert result.stdout.startswith("Once")  # stdout holds only the text
    result = gen(ws, "--seed", "0", "--checkpoint", "step-00000002")
    passed(result)
    assert "checkpoint step-00000002" in result.stderr


def test_num_samples_gives_distinct_reproducible_samples(ws):
    first = gen(ws, "--num-samples", "3", "--seed", "5", "--temperature", "1.0")
    passed(first)
    assert [line for line in first.stdout.splitlines() if line.startswith("--- sample")] == [
        "--- sample 1 ---",
        "--- sample 2 ---",
        "--- sample 3 ---",
    ]
    for i in (1, 2, 3):  # outside a terminal: one progress line per sample
        assert f"sample {i}/3" in first.stderr
    again = gen(ws, "--num-samples", "3", "--seed", "5", "--temperature", "1.0")
    passed(again)
    assert again.stdout == first.stdout
    # sample i is the single sample with seed + i - 1
    samples = first.stdout.split("--- sample ")[1:]
    second = gen(ws, "--seed", "6", "--temperature", "1.0")
    passed(second)
    assert samples[1].split("\n", 1)[1] == second.stdout


def test_an_empty_continuation_is_said(ws):
    result = gen(ws, "--max-new-tokens", "0")
    passed(result)
    assert result.stdout == "Once\n"
    assert "nothing was generated" in result.stderr


def test_a_stop_string_hit_at_once_still_prints_it(ws):
    # the continuation ends right after the stop string: never empty, so no note
    result = gen(ws, "--seed", "0", "--stop", "e", "--stop", " ", "--stop", "a", "--stop", "o", "-n", "40")
    passed(result)
    assert "nothing was generated" not in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["generate", "{run}", "--prompt", "Once", "-n", "2"],
        ["eval", "{run}", "--data", "{corpus}", "--max-tokens", "300", "--context-lengths", "16"],
        ["viz", "attention", "{run}", "--prompt", "Once", "--out", "{out}"],
    ],
    ids=["generate", "eval", "viz"],
)
@pytest.mark.parametrize(
    "extra, code, phrase",
    [
        (["--device", "cuda"], 1, "no CUDA GPU is available"),
        (["--device", "tpu"], 1, "--device must be cpu, cuda or auto"),
        (["--threads", "0"], 1, "--threads must be a positive integer"),
        (["--threads", "-2"], 1, "--threads must be a positive integer"),
        (["--device", "cpu", "--threads", "1"], 0, "on cpu (1 thread)"),
    ],
    ids=["cuda-without-gpu", "unknown-device", "threads-0", "threads-negative", "cpu-1-thread"],
)
def test_device_and_threads(ws, tmp_path, command, extra, code, phrase):
    if extra[:2] == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("a GPU is available here")
    args = [a.format(run=ws / "run", corpus=ws / "corpus.txt", out=tmp_path / "viz") for a in command]
    result = cli(*args, *extra)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert phrase in result.output
    if code:
        assert "error:" in result.stderr
    torch.set_num_threads(max(1, torch.get_num_threads()))


def test_eval_names_the_run_and_prints_progress_lines(ws):
    for extra in ([], ["--no-progress"]):
        result = cli(
            "eval",
            str(ws / "run"),
            "--data",
            str(ws / "corpus.txt"),
            "--context-lengths",
            "16,32",
            "--max-tokens",
            "400",
            "--json",
            "--device",
            "cpu",
            *extra,
        )
        passed(result)
        assert "checkpoint final" in result.stderr and "attention: auto (chooses on cpu:" in result.stderr
        assert "eval 1/2: corpus.txt at context 16" in result.stderr
        assert "eval 2/2: corpus.txt at context 32" in result.stderr
        assert result.stdout.lstrip().startswith("[")  # --json stays clean on stdout


@pytest.mark.slow  # compiles the decode step (alilama train --build-decode)
def test_train_builds_the_decode_step_that_generate_and_load_run_then_decode_on(ws, tmp_path):
    """`alilama train` ends by building the run's compiled step (RUN/compiled/); `generate` (auto) and the
    Python API (`load_run` -> `generate_text`) then decode on it, with the eager path's greedy text; a run
    trained without it says how to build it. A wrong choice is refused by name."""
    from alilama_core.engine.decode import decode_plan
    from alilama_core.engine.generation import SamplingSettings, generate_text
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.compiled import FOLDER

    def greedy(run: Path, *args: str):
        result = cli("generate", str(run), "--prompt", "Once", "-n", "12", "-t", "0", "--device", "cpu", *args)
        passed(result)
        return result

    eager = greedy(ws / "run", "--decode", "eager")
    assert "decode: eager (decode='eager')" in eager.stderr
    before = greedy(ws / "run")  # auto on a run trained with --no-build-decode: eager, and how to build it
    assert "`--decode compiled` builds" in before.stderr and before.stdout == eager.stdout
    assert not (ws / "run" / FOLDER).exists()

    run = tmp_path / "run"  # the same training again (same seed and data: the same weights), with the build
    trained = cli("train", *TINY, "--data", str(ws / "data"), "--out", str(run), "--build-decode")
    passed(trained)
    assert "decode: compiled step ready in" in trained.stderr
    assert [p.suffix for p in (run / FOLDER).iterdir()] == [".pt2"]
    after = greedy(run)
    assert "decode: compiled" in after.stderr and "ready" not in after.stderr  # loaded, not built again
    assert after.stdout == eager.stdout
    (package,) = (run / FOLDER).iterdir()
    built_at = package.stat().st_mtime_ns
    again = greedy(run, "--decode", "compiled")  # loads the package the training built
    assert again.stdout == eager.stdout and package.stat().st_mtime_ns == built_at

    loaded = load_run(run)  # the Python API finds the step with no call of its own
    assert decode_plan(loaded.model).path == "compiled"
    text = generate_text(loaded, "Once", SamplingSettings(max_new_tokens=12, temperature=0))
    assert eager.stdout.strip() == ("Once" + text).strip()
    wrong = cli("generate", str(run), "--prompt", "Once", "--decode", "fast")
    assert wrong.exit_code == 1 and "--decode" in wrong.output and "fast" in wrong.output
