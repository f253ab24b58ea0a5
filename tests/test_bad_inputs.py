"""A careless or unlucky user's mistakes, one table row each: nothing lost, nothing mixed, no traceback.

Each case is a command line, the exit code it must give, a phrase its output
must contain, and files that must still exist afterwards. Cases run in-process
through typer's ``CliRunner``; the concurrency and kill tests use real
processes. ``docs/what-happens-when.md`` lists the same cases.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from alilama_testing import TINY_TRAIN
from typer.testing import CliRunner

from alilama_core.app.cli import get_app
from alilama_core.runs.checkpoint import checkpoints

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_ARGS = ["--vocab-size", "300", "--special", "<|endoftext|>"]
TINY = TINY_TRAIN


def cli(*args: str, cwd: Path | None = None):
    """Run ``alilama ARGS`` in this process; returns the click result (output holds stdout and stderr)."""
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(get_app(), list(args), catch_exceptions=True)
    finally:
        os.chdir(old)


# -- a workspace: corpus, tokenizer, data, one finished run ----------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("base")
    write_corpus(root / "corpus.txt", 300, seed=3)
    for args in (
        ["tokenizer", "train", "--input", str(root / "corpus.txt"), *TOKENIZER_ARGS, "--out", str(root / "tok")],
        [
            "data",
            "prepare",
            "--input",
            str(root / "corpus.txt"),
            "--tokenizer",
            str(root / "tok"),
            "--out",
            str(root / "data"),
            "--val-fraction",
            "0.1",
        ],
        ["train", *TINY, "train.max_steps=6", "--data", str(root / "data"), "--out", str(root / "run")],
    ):
        result = cli(*args)
        assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def ws(base, tmp_path) -> Path:
    """A private copy of the workspace (each case may damage it)."""
    import shutil

    for name in ("corpus.txt", "tok", "data", "run"):
        src = base / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, tmp_path / name)
    return tmp_path


# -- the table ------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    args: list[str]
    code: int
    phrase: str
    keep: list[str] = field(default_factory=list)
    """Paths (relative to the workspace) that must still exist afterwards."""
    setup: Callable[[Path], None] | None = None
    check: Callable[[Path, str], None] | None = None
    """Further assertions on the workspace and the output."""
    env: dict[str, str] | None = None
    """Environment variables: the command then runs as a real process started with them (libraries read
    some, such as HF_HUB_OFFLINE, once at import)."""


def _write(path: str, data: str | bytes):
    def setup(ws: Path) -> None:
        p = ws / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())

    return setup


def _both(*setups):
    def setup(ws: Path) -> None:
        for s in setups:
            s(ws)

    return setup


def _flip_a_bit(ws: Path) -> None:
    path = ws / "run" / "final" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10
    path.write_bytes(bytes(data))


def _swap_tokenizer(vocab_size: int):
    def setup(ws: Path) -> None:
        import shutil

        from alilama_core.app.prepare import iter_documents
        from alilama_core.engine.registry import get_tokenizer

        shutil.rmtree(ws / "run" / "tokenizer")
        get_tokenizer("bpe").train(
            iter_documents([str(ws / "corpus.txt")]), vocab_size, special_tokens=["<|endoftext|>"]
        ).save(ws / "run" / "tokenizer")

    return setup


def _other_weights(ws: Path) -> None:
    from alilama_core.engine import configs as cfgmod
    from alilama_core.engine.model import build_model
    from alilama_core.runs.checkpoint import save_weights

    cfg = cfgmod.load(ws / "run" / "config.yaml")
    cfg.model.d_model, cfg.model.d_mlp = 16, 32
    save_weights(build_model(cfg.model), ws / "run" / "final")


def _drop_state_keys(ws: Path) -> None:
    for ckpt in checkpoints(ws / "run"):
        state = json.loads((ckpt / "state.json").read_text())
        state.pop("sampler")
        (ckpt / "state.json").write_text(json.dumps(state))
    import shutil

    shutil.rmtree(ws / "run" / "final")


def _torn_metrics(ws: Path) -> None:
    with open(ws / "run" / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "tok')


def _unfinished(ws: Path) -> None:
    """Make the run look killed at step 4: no final, no step 6, a torn metrics line, a stale temp folder."""
    import shutil

    shutil.rmtree(ws / "run" / "final")
    shutil.rmtree(ws / "run" / "step-00000006")
    with open(ws / "run" / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "tok')
    (ws / "run" / ".step-00000006.abc123.tmp").mkdir()
    (ws / "run" / ".step-00000006.abc123.tmp" / "model.safetensors").write_bytes(b"half")


def _resumed_at_4(ws: Path, out: str) -> None:
    assert "resuming from step-00000004" in out and "dropped 1 unreadable line" in out
    assert "removed 1 unfinished temporary" in out
    assert not (ws / "run" / ".step-00000006.abc123.tmp").exists()
    rows = [json.loads(x) for x in (ws / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]


def _config_saved(ws: Path, out: str) -> None:
    from alilama_core.engine import configs as cfgmod

    assert cfgmod.load(ws / "run" / "config.yaml").train.max_steps == 8
    record = json.loads((ws / "run" / "run.json").read_text())
    assert record["history"][-1]["changed"] == {"train.max_steps": [6, 8]}
    assert max(json.loads(x)["step"] for x in (ws / "run" / "metrics.jsonl").read_text().splitlines()) == 8


def _nothing_trained(ws: Path, out: str) -> None:
    assert "done:" not in out and "raise it (e.g. train.max_steps=12)" in out
    assert max(json.loads(x)["step"] for x in (ws / "run" / "metrics.jsonl").read_text().splitlines()) == 6


PREP_GIVEN = ["data", "prepare", "-i", "corpus.txt", "--val-input", "valid.txt", "--tokenizer", "tok", "--out"]


def _val_fraction_is(value: float):
    def check(ws: Path, out: str) -> None:
        assert json.loads((ws / "data" / "meta.json").read_text())["val_fraction"] == value

    return check


def _budget_run(ws: Path, out: str, seconds: int) -> None:
    """A run trained by a time budget alone (``train.max_steps=null``) until it was spent."""
    result = cli(
        "train", *TINY, "train.max_steps=null", f"train.max_time={seconds}", "--data", "data", "--out", out, cwd=ws
    )
    assert result.exit_code == 0 and "stopped by the time budget" in result.output, result.output


def _absent(path: str):
    def check(ws: Path, out: str) -> None:
        assert not (ws / path).exists(), f"{path} was written"

    return check


def _three_layers(ws: Path, out: str) -> None:
    counts = {row["count"] for row in json.loads(out)["table"] if row["name"].startswith("blocks.")}
    assert counts == {3}


def _learned_run(ws: Path) -> None:
    """A run whose learned position table holds 16 positions (weights at initialisation)."""
    import shutil

    from alilama_core.engine import configs as cfgmod
    from alilama_core.engine.model import build_model
    from alilama_core.runs.checkpoint import save_weights

    cfg = cfgmod.load(ws / "run" / "config.yaml")
    cfg.model.positional, cfg.model.context_length, cfg.model.attention = "learned", 16, "eager"
    run = ws / "lrun"
    run.mkdir()
    cfgmod.save(cfg, run / "config.yaml")
    shutil.copytree(ws / "run" / "tokenizer", run / "tokenizer")
    save_weights(build_model(cfg.model), run / "final")


def _npy(ws: Path) -> None:
    (ws / "ids.npy").write_bytes(b"\x93NUMPY this is not an array")


def _split_by_position(ws: Path, out: str) -> None:
    meta = json.loads((ws / "bookdata" / "meta.json").read_text())
    assert meta["split"] == "position" and meta["splits"]["val"]["tokens"] > 0


def _user_folder(ws: Path) -> None:
    (ws / "proj").mkdir()
    (ws / "proj" / "notes.txt").write_text("my notes")


def _folder_input(ws: Path) -> None:
    (ws / "c").mkdir()
    (ws / "c" / "corpus.txt").write_text((ws / "corpus.txt").read_text())


CASES = [
    # -- never delete what Alilama did not write -------------------------------------------------
    Case(
        "train --overwrite on a user's folder",
        ["train", *TINY, "--data", "data", "--out", "proj", "--overwrite"],
        1,
        "nothing was deleted",
        ["proj/notes.txt"],
        setup=_user_folder,
    ),
    Case(
        "train --overwrite on a run holding a user's file",
        ["train", *TINY, "--data", "data", "--out", "run", "--overwrite"],
        1,
        "files Alilama did not write (notes.txt)",
        ["run/notes.txt", "run/final/model.safetensors"],
        setup=_write("run/notes.txt", "mine"),
    ),
    Case(
        "train --out equal to --data",
        ["train", *TINY, "--data", "data", "--out", "data", "--overwrite"],
        1,
        "is the input",
        ["data/meta.json", "data/train.bin"],
    ),
    Case(
        "train --out containing --data",
        ["train", *TINY, "--data", "data", "--out", ".", "--overwrite"],
        1,
        "contains the input",
        ["data/meta.json", "corpus.txt"],
    ),
    Case(
        "train --out inside --data",
        ["train", *TINY, "--data", "data", "--out", "data/run", "--overwrite"],
        1,
        "lies inside the input",
        ["data/meta.json"],
    ),
    Case(
        "data prepare --out equal to --input",
        ["data", "prepare", "--input", "c", "--tokenizer", "tok", "--out", "c", "--overwrite"],
        1,
        "is the input",
        ["c/corpus.txt"],
        setup=_folder_input,
    ),
    Case(
        "data prepare --out containing --input",
        ["data", "prepare", "--input", "c/corpus.txt", "--tokenizer", "tok", "--out", "c", "--overwrite"],
        1,
        "contains the input",
        ["c/corpus.txt"],
        setup=_folder_input,
    ),
    Case(
        "data prepare --out is the tokenizer",
        ["data", "prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--out", "tok", "--overwrite"],
        1,
        "is the input",
        ["tok/tokenizer.model"],
    ),
    Case(
        "data prepare --overwrite on a user's folder",
        ["data", "prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--out", "proj", "--overwrite"],
        1,
        "nothing was deleted",
        ["proj/notes.txt"],
        setup=_user_folder,
    ),
    Case(
        "data prepare --overwrite on a run",
        ["data", "prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--out", "run", "--overwrite"],
        1,
        "holds a run",
        ["run/final/model.safetensors"],
    ),
    Case(
        "data prepare --overwrite on its own output",
        [
            "data",
            "prepare",
            "--input",
            "corpus.txt",
            "--tokenizer",
            "tok",
            "--out",
            "data",
            "--overwrite",
            "--val-fraction",
            "0.2",
        ],
        0,
        "wrote data",
        check=_val_fraction_is(0.2),
    ),
    # -- outputs that cannot be written --------------------------------------------------------
    Case(
        "train --out is a file",
        ["train", *TINY, "--data", "data", "--out", "corpus.txt"],
        1,
        "is a file",
        ["corpus.txt"],
    ),
    Case(
        "train --out under a file",
        ["train", *TINY, "--data", "data", "--out", "corpus.txt/run"],
        1,
        "is a file, not a folder",
        ["corpus.txt"],
    ),
    Case(
        "train --out in a place nobody may write",
        ["train", *TINY, "--data", "data", "--out", "/proc/alilama-run"],
        1,
        "cannot",
    ),
    Case(
        "data prepare --out is a file",
        ["data", "prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--out", "notes.txt"],
        1,
        "is a file",
        ["notes.txt"],
        setup=_write("notes.txt", "mine"),
    ),
    Case(
        "data prepare --out in a place nobody may write",
        ["data", "prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--out", "/proc/alilama-data"],
        1,
        "cannot",
    ),
    Case(
        "data prepare --out into a missing folder",
        ["data", "prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--out", "new/deeper/data"],
        0,
        "wrote",
        ["new/deeper/data/meta.json"],
    ),
    Case("plot --out is a folder", ["plot", "run", "--out", "data"], 1, "is a folder", ["data/meta.json"]),
    Case("plot --out under a file", ["plot", "run", "--out", "corpus.txt/loss.png"], 1, "is a file, not a folder"),
    Case("plot --out in a place nobody may write", ["plot", "run", "--out", "/proc/alilama.png"], 1, "cannot write"),
    Case(
        "plot a run with a torn last metrics line",
        ["plot", "run", "--out", "loss.png"],
        0,
        "wrote loss.png",
        ["loss.png"],
        setup=_torn_metrics,
    ),
    Case(
        "plot --out into a missing folder",
        ["plot", "run", "--out", "figs/new/loss.png"],
        0,
        "wrote",
        ["figs/new/loss.png"],
    ),
    # -- resume ------------------------------------------------------------------------------------
    Case(
        "resume a finished run",
        ["train", "--resume", "run", "--no-progress"],
        0,
        "the run is finished",
        ["run/final/model.safetensors"],
        check=_nothing_trained,
    ),
    Case(
        "resume a finished run with a higher max_steps",
        ["train", "--resume", "run", "--no-progress", "train.max_steps=8"],
        0,
        "done: step 8",
        check=_config_saved,
    ),
    Case(
        "resume after a kill: torn metrics line, stale temp folder, no --data",
        ["train", "--resume", "run", "--no-progress"],
        0,
        "done: step 6",
        setup=_unfinished,
        check=_resumed_at_4,
    ),
    Case(
        "resume with an architecture override",
        ["train", "--resume", "run", "model.n_layers=3"],
        1,
        "different architecture (model.n_layers 2 -> 3)",
        ["run/final/model.safetensors"],
    ),
    Case("resume with --config", ["train", "--resume", "run", "--preset", "tiny"], 1, "overrides only"),
    Case("resume a folder that is not a run", ["train", "--resume", "data"], 1, "not a run folder"),
    Case(
        "resume with a corrupt run.json",
        ["train", "--resume", "run"],
        1,
        "run.json' is corrupt",
        ["run/final/model.safetensors"],
        setup=_write("run/run.json", '{"data": "da'),
    ),
    Case(
        "resume when state.json lacks keys",
        ["train", "--resume", "run", "--no-progress"],
        1,
        "state.json lacks sampler",
        ["run/step-00000006/model.safetensors"],
        setup=_drop_state_keys,
    ),
    # -- integrity ---------------------------------------------------------------------------------
    Case(
        "generate with bit-flipped weights",
        ["generate", "run", "--prompt", "Once", "-n", "3"],
        1,
        "final/model.safetensors' differs from the weights written there",
        setup=_flip_a_bit,
    ),
    Case(
        "eval with bit-flipped weights",
        ["eval", "run", "--data", "corpus.txt"],
        1,
        "SHA-256 mismatch",
        setup=_flip_a_bit,
    ),
    Case(
        "generate --no-verify loads flipped weights",
        ["generate", "run", "--prompt", "Once", "-n", "3", "--seed", "0", "--no-verify"],
        0,
        "Once",
        setup=_flip_a_bit,
    ),
    Case(
        "generate with a swapped tokenizer",
        ["generate", "run", "--prompt", "Once", "-n", "3"],
        1,
        "differs from the one the run was trained with",
        setup=_swap_tokenizer(290),
    ),
    Case(
        "eval with a swapped tokenizer, --no-verify",
        ["eval", "run", "--data", "corpus.txt", "--no-verify"],
        1,
        "not the run's tokenizer",
        setup=_swap_tokenizer(400),
    ),
    Case(
        "weights of another architecture, --no-verify",
        ["generate", "run", "--prompt", "Once", "--no-verify"],
        1,
        "holds a different architecture",
        setup=_other_weights,
    ),
    Case(
        "a corrupt run.json on load",
        ["generate", "run", "--prompt", "Once"],
        1,
        "run.json' is corrupt",
        setup=_write("run/run.json", "\x00\x01"),
    ),
    # -- configs and overrides -------------------------------------------------------------------
    Case("1e-3 is a number", ["model", "info", "--preset", "tiny", "train.lr=1e-3", "--json"], 0, '"parameters"'),
    Case(
        "--model.n_layers=3 form",
        ["model", "info", "--preset", "tiny", "--model.n_layers=3", "--json"],
        0,
        '"parameters"',
        check=_three_layers,
    ),
    Case(
        "a misspelt option",
        ["train", "--preset", "tiny", "--data", "data", "--out", "r", "--ovewrite"],
        1,
        "no such option: --ovewrite",
        check=_absent("r"),
    ),
    Case(
        "duplicate YAML keys",
        ["model", "info", "--config", "dup.yaml"],
        1,
        "duplicate key 'n_layers'",
        setup=_write("dup.yaml", "model:\n  n_layers: 2\n  n_layers: 4\n"),
    ),
    Case(
        "a binary config file",
        ["train", "--config", "bin.yaml", "--data", "data", "--out", "r"],
        1,
        "is not a text file",
        setup=_write("bin.yaml", bytes(range(256))),
    ),
    Case(
        "an absurd model.d_model",
        ["train", "--preset", "tiny", "model.d_model=4000000", "model.n_heads=1", "--data", "data", "--out", "big"],
        1,
        "model.d_model=4,000,000 is over its limit",
        check=_absent("big"),
    ),
    Case(
        "an absurd model.d_model for model info",
        ["model", "info", "--preset", "tiny", "model.d_model=4000000", "model.n_heads=1"],
        1,
        "model.d_model=4,000,000 is over its limit",
    ),
    Case(
        "a model within every limit but too big for memory",
        [
            "train",
            "--preset",
            "tiny",
            "model.d_model=65536",
            "model.n_heads=1",
            "model.n_layers=64",
            "--data",
            "data",
            "--out",
            "big",
        ],
        1,
        "Choose a smaller model",
        check=_absent("big"),
    ),
    Case(
        "learned positions shorter than the samples",
        [
            "train",
            *TINY,
            "model.positional=learned",
            "model.context_length=16",
            "train.sample_tokens=40",
            "--data",
            "data",
            "--out",
            "learned",
        ],
        1,
        "runs past the 16 positions",
        check=_absent("learned"),
    ),
    # -- data --------------------------------------------------------------------------------------
    Case(
        "data prepare --errors bogus",
        ["data", "prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--out", "d2", "--errors", "bogus"],
        1,
        "--errors must be one of",
    ),
    Case(
        "data prepare --val-input with --val-fraction",
        [*PREP_GIVEN, "d3", "--val-fraction", "0.1"],
        1,
        "give one of the two",
        check=_absent("d3"),
    ),
    Case(
        "data prepare --val-input missing",
        ["data", "prepare", "-i", "corpus.txt", "--val-input", "nope.txt", "--tokenizer", "tok", "--out", "d3"],
        1,
        "input 'nope.txt' does not exist",
        check=_absent("d3"),
    ),
    Case(
        "data prepare --val-input empty",
        [*PREP_GIVEN, "d3"],
        1,
        "no documents found in --val-input",
        setup=lambda ws: (ws / "valid.txt").write_text(""),
        check=_absent("d3"),
    ),
    Case(
        "data prepare of one book",
        ["data", "prepare", "--input", "book.txt", "--tokenizer", "tok", "--out", "bookdata"],
        0,
        "split by position",
        setup=lambda ws: (ws / "book.txt").write_text((ws / "corpus.txt").read_text().replace("<|endoftext|>\n", "")),
        check=_split_by_position,
    ),
    Case(
        "data prepare of a missing input",
        ["data", "prepare", "--input", "nope.txt", "--tokenizer", "tok", "--out", "d3"],
        1,
        "does not exist",
        check=_absent("d3"),
    ),
    # -- eval and generate ----------------------------------------------------------------------
    Case(
        "eval --context-lengths 0",
        ["eval", "run", "--data", "corpus.txt", "--context-lengths", "0"],
        1,
        "positive integers",
    ),
    Case(
        "eval --context-lengths abc",
        ["eval", "run", "--data", "corpus.txt", "--context-lengths", "a,b"],
        1,
        "comma-separated integers",
    ),
    Case("eval of a missing file", ["eval", "run", "--data", "nope.txt"], 1, "does not exist"),
    Case("generate --stop ''", ["generate", "run", "--prompt", "Once", "--stop", ""], 1, "must not be empty"),
    Case(
        "generate past a learned position table",
        ["generate", "lrun", "--prompt", "Once upon a", "-n", "100", "--temperature", "0"],
        0,
        "generation stops there",
        setup=_learned_run,
    ),
    Case(
        "generate with a prompt longer than a learned table",
        ["generate", "lrun", "--prompt", "Once upon a time " * 9],
        1,
        "covers 16 positions; shorten the prompt",
        setup=_learned_run,
    ),
    Case("generate with a missing checkpoint", ["generate", "run", "--checkpoint", "step-9"], 1, "has no checkpoint"),
    # -- tokenizer command line ------------------------------------------------------------------
    Case(
        "tokenizer decode of a bad .npy",
        ["tokenizer", "decode", "--tokenizer", "tok", "--input", "ids.npy"],
        1,
        "ids.npy",
        setup=_npy,
    ),
    Case(
        "tokenizer encode --out into a missing folder",
        ["tokenizer", "encode", "--tokenizer", "tok", "hello", "--out", "new/dir/ids.npy"],
        1,
        "does not exist",
    ),
    Case(
        "tokenizer train --no-special with --special",
        [
            "tokenizer",
            "train",
            "--input",
            "corpus.txt",
            "--vocab-size",
            "300",
            "--no-special",
            "--special",
            "<|x|>",
            "--out",
            "t2",
        ],
        1,
        "--no-special",
    ),
    Case(
        "tokenizer train with a huge --vocab-size",
        ["tokenizer", "train", "--input", "corpus.txt", "--vocab-size", "10000000000", "--out", "t3"],
        1,
        "vocab",
    ),
    Case(
        "tokenizer train --out is a file",
        ["tokenizer", "train", "--input", "corpus.txt", *TOKENIZER_ARGS, "--out", "corpus.txt"],
        1,
        "corpus.txt",
        ["corpus.txt"],
    ),
]


# -- paths, names and ordinary mistakes ---------------------------------------------------------------


def _other_run(ws: Path) -> None:
    """A second finished run beside the first (its own weights, config and run.json)."""
    import shutil

    shutil.copytree(ws / "run", ws / "other")


def _unlisted_checkpoint(ws: Path) -> None:
    """A checkpoint folder dropped into the run that its run.json does not list."""
    import shutil

    _other_run(ws)
    shutil.copytree(ws / "other" / "step-00000006", ws / "run" / "step-00000099")


def _linked_checkpoint(ws: Path) -> None:
    _other_run(ws)
    (ws / "run" / "step-00000099").symlink_to(ws / "other" / "step-00000006", target_is_directory=True)


def _no_run_json(ws: Path) -> None:
    (ws / "run" / "run.json").unlink()


def _edited_tokenizer_model(ws: Path) -> None:
    path = ws / "tok" / "tokenizer.model"
    lines = path.read_text().splitlines()
    lines[-1], lines[-2] = lines[-2], lines[-1]  # same size, other merges
    path.write_text("\n".join(lines) + "\n")


def _user_pictures(ws: Path) -> None:
    (ws / "viz").mkdir()
    (ws / "viz" / "tape.html").write_text("<p>my page</p>")
    (ws / "viz" / "attention.png").write_bytes(b"my picture")


def _pictures_written(ws: Path) -> None:
    result = cli("viz", "attention", "run", "--prompt", "Once", "--out", "viz", cwd=ws)
    assert result.exit_code == 0, result.output


def _pictures_replaced(ws: Path, out: str) -> None:
    from alilama_core.runs.outputs import kind_of

    assert kind_of(ws / "viz") == "viz"
    assert (ws / "viz" / "attention_l0_h1.png").read_bytes()[:4] == b"\x89PNG"
    assert not (ws / "viz" / "attention.png").exists() and not (ws / "viz" / "tape.html").exists()


def _config_keeps(max_steps: int):
    def check(ws: Path, out: str) -> None:
        from alilama_core.engine import configs as cfgmod

        assert cfgmod.load(ws / "run" / "config.yaml").train.max_steps == max_steps
        history = json.loads((ws / "run" / "run.json").read_text())["history"]
        assert [h["action"] for h in history] == ["start"], history

    return check


def _escaped_card(ws: Path, out: str) -> None:
    card = (ws / "exp" / "README.md").read_text(encoding="utf-8")
    assert "\n# tiny\\_run\n" in card
    assert 'AutoModelForCausalLM.from_pretrained("me/tiny_run"' in card
    assert "[roneneldan/TinyStories](https://huggingface.co/datasets/roneneldan/TinyStories)" in card


def _malformed_task_eval(ws: Path) -> None:
    (ws / "run" / "task-eval.json").write_text(json.dumps({"rows": [{"len": 8, "exact": 1.0}]}))


INJECTED = 'me/x"); import os; os.system("id"); ("'

CASES += [
    Case(
        "generate --checkpoint into another run",
        ["generate", "run", "--prompt", "Once", "--checkpoint", "../other/step-00000006"],
        1,
        "must name one of",
        ["other/step-00000006/model.safetensors", "run/final/model.safetensors"],
        setup=_other_run,
    ),
    Case(
        "export hf --checkpoint into another run",
        ["export", "hf", "run", "exp", "--checkpoint", "../other/final"],
        1,
        "not a path",
        ["other/final/model.safetensors"],
        setup=_other_run,
        check=_absent("exp/README.md"),
    ),
    Case(
        "generate --checkpoint that run.json does not list",
        ["generate", "run", "--prompt", "Once", "--checkpoint", "step-00000099"],
        1,
        "is not one of the checkpoints recorded in",
        ["run/step-00000099/model.safetensors"],
        setup=_unlisted_checkpoint,
    ),
    Case(
        "generate --checkpoint linked out of the run",
        ["generate", "run", "--prompt", "Once", "--checkpoint", "step-00000099"],
        1,
        "is a link to a folder outside the run",
        ["other/step-00000006/model.safetensors"],
        setup=_linked_checkpoint,
    ),
    Case(
        "generate with run.json deleted",
        ["generate", "run", "--prompt", "Once", "-n", "3"],
        1,
        "has no run.json",
        ["run/final/model.safetensors"],
        setup=_no_run_json,
    ),
    Case(
        "eval with run.json deleted",
        ["eval", "run", "--data", "corpus.txt"],
        1,
        "pass --no-verify (generate, eval) to load the run unchecked",
        setup=_no_run_json,
    ),
    Case(
        "generate --no-verify with run.json deleted",
        ["generate", "run", "--prompt", "Once", "-n", "3", "--seed", "0", "--no-verify"],
        0,
        "Once",
        setup=_no_run_json,
    ),
    Case(
        "tokenizer encode with an edited tokenizer.model given as a file",
        ["tokenizer", "encode", "--tokenizer", "tok/tokenizer.model", "hello"],
        1,
        "does not match tokenizer_config.json",
        setup=_edited_tokenizer_model,
    ),
    Case(
        "export hf --repo-id with code in it",
        ["export", "hf", "run", "exp", "--repo-id", INJECTED],
        1,
        "is not a valid Hugging Face Hub id",
        check=_absent("exp"),
    ),
    Case(
        "export hf --dataset with Markdown in it",
        ["export", "hf", "run", "exp", "--dataset", "x](https://evil.example)"],
        1,
        "--dataset 'x](https://evil.example)' is not a valid Hugging Face Hub id",
        check=_absent("exp"),
    ),
    Case(
        "export hf writes names escaped",
        ["export", "hf", "run", "exp", "--repo-id", "me/tiny_run", "--dataset", "roneneldan/TinyStories"],
        0,
        "exported run",
        ["exp/README.md"],
        check=_escaped_card,
    ),
    Case(
        "resume a finished run with a lower max_steps",
        ["train", "--resume", "run", "--no-progress", "train.max_steps=4"],
        1,
        "the run has already reached step 6. Give train.max_steps=6 or more",
        ["run/final/model.safetensors", "run/step-00000006/model.safetensors"],
        check=_config_keeps(6),
    ),
    Case(
        "resume a killed run with max_steps below its step",
        ["train", "--resume", "run", "--no-progress", "train.max_steps=2"],
        1,
        "the run has already reached step 4",
        ["run/step-00000004/model.safetensors"],
        setup=_unfinished,
        check=_config_keeps(6),
    ),
    Case(
        "train --data with --task",
        ["train", *TINY, "--task", "copy", "--data", "data", "--out", "t"],
        1,
        "exclude each other",
        ["data/meta.json"],
        check=_absent("t"),
    ),
    Case(
        "viz attention over a user's pictures",
        ["viz", "attention", "run", "--prompt", "Once", "--out", "viz"],
        1,
        "already exists and holds other files",
        ["viz/tape.html", "viz/attention.png"],
        setup=_user_pictures,
    ),
    Case(
        "viz attention --overwrite over a user's pictures",
        ["viz", "attention", "run", "--prompt", "Once", "--out", "viz", "--overwrite"],
        1,
        "nothing was deleted",
        ["viz/tape.html", "viz/attention.png"],
        setup=_user_pictures,
    ),
    Case(
        "viz attention into its own earlier pictures",
        ["viz", "attention", "run", "--prompt", "Once", "--out", "viz"],
        1,
        "pass --overwrite to replace it",
        ["viz/tape.html", "viz/attention.png"],
        setup=_pictures_written,
    ),
    Case(
        "viz attention --overwrite of its own earlier pictures",
        ["viz", "attention", "run", "--prompt", "Once", "--out", "viz", "--overwrite", "--layer", "0", "--no-html"],
        0,
        "wrote viz/attention_l0_h1.png",
        setup=_pictures_written,
        check=_pictures_replaced,
    ),
    Case(
        "task.val_examples=0",
        ["train", *TINY, "--task", "copy", "task.val_examples=0", "--out", "t"],
        1,
        "task.val_examples must be a positive integer",
        check=_absent("t"),
    ),
    Case(
        "a negative task.seed",
        ["train", *TINY, "--task", "copy", "task.seed=-1", "--out", "t"],
        1,
        "task.seed must be an integer >= 0",
        check=_absent("t"),
    ),
    Case(
        "a negative train.seed",
        ["train", *TINY, "train.seed=-1", "--data", "data", "--out", "t"],
        1,
        "train.seed must be an integer >= 0",
        check=_absent("t"),
    ),
    Case(
        "train.max_steps=null without a time budget",
        ["train", *TINY, "train.max_steps=null", "--data", "data", "--out", "t"],
        1,
        "train.max_steps is null, so training needs a time budget: set train.max_time",
        check=_absent("t"),
    ),
    Case(
        "train.max_time=0",
        ["train", *TINY, "train.max_time=0", "--data", "data", "--out", "t"],
        1,
        "train.max_time must be a positive number of seconds or null",
        check=_absent("t"),
    ),
    Case(
        "train.evals_per_budget=-1",
        ["train", *TINY, "train.max_time=60", "train.evals_per_budget=-1", "--data", "data", "--out", "t"],
        1,
        "train.evals_per_budget must be an integer >= 0",
        check=_absent("t"),
    ),
    Case(
        "resume a run that spent its time budget",
        ["train", "--resume", "budget", "--no-progress"],
        0,
        "it spent its time budget, train.max_time=3 s",
        keep=["budget/final/model.safetensors"],
        setup=lambda ws: _budget_run(ws, "budget", 3),
    ),
    Case("eval --seed negative", ["eval", "run", "--lengths", "4", "--seed=-1"], 1, "--seed must be an integer >= 0"),
    Case(
        "RoPE theta=abc",
        ["model", "info", "--preset", "tiny", "model.positional=rope", "model.positional_options.theta=abc"],
        1,
        "theta must be a finite number above 1",
    ),
    Case(
        "RoPE theta=-5",
        ["train", *TINY, "model.positional=rope", "model.positional_options.theta=-5", "--data", "data", "--out", "t"],
        1,
        "got -5",
        check=_absent("t"),
    ),
    Case(
        "train.lr=.nan",
        ["train", *TINY, "train.lr=.nan", "--data", "data", "--out", "t"],
        1,
        "train.lr must be a finite number, got nan",
        check=_absent("t"),
    ),
    Case(
        "train.lr=.inf",
        ["train", *TINY, "train.lr=.inf", "--data", "data", "--out", "t"],
        1,
        "train.lr must be a finite number, got inf",
        check=_absent("t"),
    ),
    Case(
        "plot --accuracy of a malformed task-eval.json",
        ["plot", "run", "--accuracy", "--out", "acc.png"],
        1,
        "is not the file `alilama eval` writes (no trained_lengths",
        ["run/task-eval.json"],
        setup=_malformed_task_eval,
        check=_absent("acc.png"),
    ),
    Case(
        "data prepare --input hf:NAME offline",
        ["data", "prepare", "--input", "hf:roneneldan/TinyStories", "--tokenizer", "tok", "--out", "hfdata"],
        1,
        "could not reach dataset 'roneneldan/TinyStories' on the Hugging Face Hub",
        ["tok/tokenizer.model"],
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        check=_absent("hfdata"),
    ),
]


# -- runaway and silent behaviours ------------------------------------------------------------------


def _task_run(ws: Path) -> None:
    """A tiny run trained on the sort task (two steps)."""
    result = cli("train", *TINY, "--task", "sort", "task.lengths=1-4", "train.max_steps=2", "--out", "trun", cwd=ws)
    assert result.exit_code == 0, result.output


def _string_loss(ws: Path) -> None:
    with open(ws / "run" / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "tokens": 9000, "train_loss": "2.5"}\n')


def _elapsed_goes_on(ws: Path, out: str) -> None:
    rows = [json.loads(x) for x in (ws / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 9))
    elapsed = [r["elapsed_s"] for r in rows]
    assert elapsed == sorted(elapsed) and elapsed[6] > elapsed[5], elapsed  # step 7 counts on from step 6


SHARED_CSV = ["train.loggers=[csv]", "train.logger_options.csv.dir=shared"]


def _logged_to_shared_csv(ws: Path) -> None:
    """The run, trained again for 6 steps with its csv files in ``shared/run``."""
    args = ["train", *TINY, "train.max_steps=6", "--data", "data", "--out", "run", "--overwrite", *SHARED_CSV]
    result = cli(*args, cwd=ws)
    assert result.exit_code == 0, result.output


def _csv_fresh(ws: Path, out: str) -> None:
    import csv

    with open(ws / "shared" / "run" / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "key", "value"] and rows.count(["step", "key", "value"]) == 1
    assert [int(r[0]) for r in rows if r[1] == "train_loss"] == [1, 2, 3, 4]  # the new run's steps only
    with open(ws / "shared" / "run" / "summary.csv", newline="") as f:
        assert dict(csv.reader(f))["step"] == "4"


def _port_nobody_listens_on() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MLFLOW_NOBODY = f"http://127.0.0.1:{_port_nobody_listens_on()}"


def _said_at_once(ws: Path, out: str) -> None:
    said = out.index(f"mlflow: cannot reach the MLflow tracking server {MLFLOW_NOBODY} (Connection refused)")
    assert out.index(f"mlflow: connecting to the tracking server {MLFLOW_NOBODY}") < said < out.index("done: step")
    assert [r["step"] for r in map(json.loads, (ws / "t" / "metrics.jsonl").read_text().splitlines())] == [1, 2]


CASES += [
    Case(
        "train --task with examples past MAX_TASK_CONTEXT",
        ["train", *TINY, "--task", "sort", "task.lengths=1-5000", "--out", "t"],
        1,
        "up to 10,001 tokens long: every training step would attend over 10,001 positions (model.context_length "
        "must cover them), more than a task run may take. Give task.lengths=1-1023 or shorter, or raise the bound: "
        "the limit is MAX_TASK_CONTEXT=2,048",
        check=_absent("t"),
    ),
    Case(
        "eval --task with --data",
        ["eval", "run", "--task", "sort", "--data", "corpus.txt"],
        1,
        "--data scores a run trained on text, --task a run trained on a task: a run is one or the other",
    ),
    Case(
        "eval a task run with --data",
        ["eval", "trun", "--data", "corpus.txt"],
        1,
        "'trun' was trained on task 'sort', not on text, so --data cannot score it",
        setup=_task_run,
    ),
    Case(
        "eval --context-lengths with --lengths",
        ["eval", "run", "--lengths", "4", "--context-lengths", "128"],
        1,
        "--context-lengths is for a text run (with --data)",
    ),
    Case("eval --lengths ''", ["eval", "run", "--lengths", ""], 1, "--lengths is empty: give the lengths to score at"),
    Case(
        "eval --context-lengths ''",
        ["eval", "run", "--data", "corpus.txt", "--context-lengths", ""],
        1,
        "--context-lengths is empty",
    ),
    Case(
        "plot an eval file with a number written as a string",
        ["plot", "ev.json", "--out", "bpb.png"],
        1,
        "'ev.json' row 1: bpb is '1.2', not a number, so it cannot be plotted",
        ["ev.json"],
        setup=_write(
            "ev.json", json.dumps([{"context_length": 128, "bpb": 1.1}, {"context_length": 256, "bpb": "1.2"}])
        ),
        check=_absent("bpb.png"),
    ),
    Case(
        "plot a run whose metrics.jsonl holds a loss written as a string",
        ["plot", "run", "--out", "loss.png"],
        0,
        "left out 1 row(s) of 'run/metrics.jsonl' whose tokens or train_loss is not a number",
        ["loss.png"],
        setup=_string_loss,
    ),
    Case(
        "elapsed_s goes on across a resume",
        ["train", "--resume", "run", "--no-progress", "train.max_steps=8"],
        0,
        "done: step 8",
        check=_elapsed_goes_on,
    ),
    Case(
        "data prepare --val-input equal to --input",
        ["data", "prepare", "-i", "corpus.txt", "--val-input", "corpus.txt", "--tokenizer", "tok", "--out", "d3"],
        1,
        "--val-input 'corpus.txt' is the same file as --input 'corpus.txt': the model would be validated on "
        "documents it trains on",
        check=_absent("d3"),
    ),
    Case(
        "data prepare --val-input a link to --input",
        ["data", "prepare", "-i", "corpus.txt", "--val-input", "valid.txt", "--tokenizer", "tok", "--out", "d3"],
        1,
        "--val-input 'valid.txt' is the same file as --input 'corpus.txt'",
        setup=lambda ws: (ws / "valid.txt").symlink_to("corpus.txt"),
        check=_absent("d3"),
    ),
    Case(
        "data prepare --val-input inside the --input folder",
        ["data", "prepare", "-i", "c", "--val-input", "c/corpus.txt", "--tokenizer", "tok", "--out", "d3"],
        1,
        "--val-input 'c/corpus.txt' and --input 'c' both hold the file 'c/corpus.txt'",
        setup=_folder_input,
        check=_absent("d3"),
    ),
    Case(
        "train --overwrite of a run that logs to a shared csv folder",
        ["train", *TINY, "train.max_steps=4", "--data", "data", "--out", "run", "--overwrite", *SHARED_CSV],
        0,
        "done: step 4",
        setup=_logged_to_shared_csv,
        check=_csv_fresh,
    ),
    Case(
        "train with an MLflow server that does not answer",
        [
            "train",
            *TINY,
            "train.max_steps=2",
            "train.loggers=[mlflow]",
            f"train.logger_options.mlflow.tracking_uri={MLFLOW_NOBODY}",
            "--data",
            "data",
            "--out",
            "t",
        ],
        0,
        "logger 'mlflow' failed in start()",
        check=_said_at_once,
    ),
]


IN_PROCESS = [c for c in CASES if c.env is None]
IN_A_PROCESS = [c for c in CASES if c.env is not None]  # an environment of their own: a process of their own


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.name for c in IN_PROCESS])
def test_case(case: Case, ws: Path):
    before = _prepared(case, ws)
    result = cli(*case.args, cwd=ws)
    unexpected = result.exception if not isinstance(result.exception, SystemExit) else None
    _checked(case, ws, before, result.output, result.exit_code, unexpected)


@pytest.mark.parametrize("case", IN_A_PROCESS, ids=[c.name for c in IN_A_PROCESS])
def test_case_in_a_process(case: Case, ws: Path):
    before = _prepared(case, ws)
    proc = _alilama(*case.args, cwd=ws, env={**os.environ, **case.env})
    stdout, stderr = proc.communicate(timeout=300)
    _checked(case, ws, before, stdout + stderr, proc.returncode, None)


def _prepared(case: Case, ws: Path) -> dict[str, bytes | None]:
    """Set the case's workspace up; the bytes of each file it must keep, as they were before the command."""
    if any(a.startswith("/proc/") for a in case.args) and not Path("/proc/self").exists():
        pytest.skip("needs Linux's /proc as a place nobody may write")
    if case.setup:
        case.setup(ws)
    return {p: (ws / p).read_bytes() if (ws / p).is_file() else None for p in case.keep}


def _checked(case: Case, ws: Path, before: dict, out: str, exit_code: int, unexpected: BaseException | None) -> None:
    """The case's exit code and phrase, one clear error line, its files kept unchanged, no temporary file left."""
    assert "Traceback" not in out, out
    flat = " ".join(out.split())  # the console wraps long lines
    assert unexpected is None, f"{type(unexpected).__name__}: {unexpected}\n{out}"
    assert exit_code == case.code, out
    assert " ".join(case.phrase.split()) in flat, out
    if case.code:
        assert [line for line in out.splitlines() if line.startswith("error:")], out  # one clear error line
    for path in case.keep:
        assert (ws / path).exists(), f"{path} was deleted"
        if before[path] is not None:
            assert (ws / path).read_bytes() == before[path], f"{path} was changed"
    if case.check:
        case.check(ws, flat if case.code or "--json" not in case.args else out)
    leftovers = [p for p in ws.rglob("*.tmp") if ".lock" not in p.name]
    assert not leftovers, leftovers


# -- real processes: two writers, and a kill in the middle of a checkpoint --------------------------


def _alilama(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from alilama_core.app.cli import main; main()", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_a_second_writer_on_a_run_fails_at_once_naming_the_first(ws):
    first = _alilama(
        "train",
        "--resume",
        "run",
        "--no-progress",
        "train.max_steps=100000",
        "train.checkpoint_every=100000",
        "train.eval_every=100000",
        cwd=ws,
    )
    try:
        deadline = time.time() + 120
        metrics = ws / "run" / "metrics.jsonl"
        while time.time() < deadline and metrics.read_text().count("\n") < 8 and first.poll() is None:
            time.sleep(0.2)
        assert first.poll() is None, first.communicate()
        started = time.perf_counter()
        second = cli("train", "--resume", "run", "--no-progress", "train.max_steps=20", cwd=ws)
        assert time.perf_counter() - started < 30
        assert second.exit_code == 1 and "Traceback" not in second.output
        assert f"being written by another process (PID {first.pid})" in second.output
        overwrite = cli("train", *TINY, "--data", "data", "--out", "run", "--overwrite", cwd=ws)
        assert overwrite.exit_code == 1 and f"PID {first.pid}" in overwrite.output
    finally:
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    # The run is the first writer's alone: its config, and metrics with one line per step.
    from alilama_core.engine import configs as cfgmod

    assert cfgmod.load(ws / "run" / "config.yaml").train.max_steps == 100000
    steps = [json.loads(x)["step"] for x in (ws / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))


KILL_IN_CHECKPOINT = """
import os, signal, sys
import torch
import alilama_trainers.trainer as trainer
real = torch.save
def save(obj, path, *a, **k):
    if str(path).endswith("rng.pt") and ".step-00000004." in str(path):
        with open(path, "wb") as f:
            f.write(b"half a file")
        os.kill(os.getpid(), signal.SIGKILL)  # killed while writing the checkpoint of step 4
    return real(obj, path, *a, **k)
trainer.torch.save = save
from alilama_core.app.cli import main
main()
"""


def test_a_kill_during_a_checkpoint_leaves_a_run_that_resumes_bit_identically(ws):
    common = [*TINY, "train.max_steps=6", "train.eval_every=100", "--data", "data"]
    straight = cli("train", *common, "--out", "straight", cwd=ws)
    assert straight.exit_code == 0, straight.output
    killed = subprocess.run(
        [sys.executable, "-c", KILL_IN_CHECKPOINT, "train", *common, "--out", "split"],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run = ws / "split"
    assert [p.name for p in checkpoints(run)] == ["step-00000002"]  # step 4 never appeared half-written
    assert [p for p in run.iterdir() if p.name.startswith(".step-00000004.")]  # its temporary folder did
    resumed = cli("train", "--resume", "split", "--no-progress", cwd=ws)  # no --data: run.json has it
    assert resumed.exit_code == 0, resumed.output
    assert "resuming from step-00000002" in resumed.output and "removed 1 unfinished" in resumed.output
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]

    def losses(path):
        return {r["step"]: r["train_loss"] for r in map(json.loads, (path / "metrics.jsonl").read_text().splitlines())}

    assert losses(run) == losses(ws / "straight")  # bit for bit
    a = (ws / "straight" / "final" / "model.safetensors").read_bytes()
    assert (run / "final" / "model.safetensors").read_bytes() == a
    record = json.loads((run / "run.json").read_text())
    assert [h["action"] for h in record["history"]] == ["start", "resume"]
    assert np.all([len(v) == 64 for v in record["checkpoints"].values()])


def test_every_case_is_listed_in_the_docs():
    page = (ROOT / "docs" / "what-happens-when.md").read_text(encoding="utf-8")
    missing = [c.name for c in CASES if c.name not in page]
    assert not missing, missing


def test_a_lock_where_nothing_can_be_written_names_the_folder(tmp_path):
    """The folder lock itself reports a parent it cannot create (check_output usually catches it first)."""
    from alilama_core.base.errors import OutputError
    from alilama_core.base.files import exclusive_lock

    (tmp_path / "a-file").write_text("mine")
    with pytest.raises(OutputError, match=r"cannot write the data folder '.*a-file/data'"):
        with exclusive_lock(tmp_path / "a-file" / "data", "data folder"):
            pass
    assert (tmp_path / "a-file").read_text() == "mine"


# -- progress outside a terminal ------------------------------------------------------------------


def test_prepare_outside_a_terminal_prints_plain_progress_lines(base, tmp_path):
    import re

    from alilama_testing import ok, run_cli

    corpus, out = base / "corpus.txt", tmp_path / "data"
    result = run_cli("data", "prepare", "--input", str(corpus), "--tokenizer", str(base / "tok"), "--out", str(out))
    ok(result)
    meta = json.loads((out / "meta.json").read_text())
    documents = sum(s["documents"] for s in meta["splits"].values())
    tokens = sum(s["tokens"] for s in meta["splits"].values())
    assert f"encode: reading {corpus} ({corpus.stat().st_size:,} bytes)" in result.stderr
    assert re.search(
        rf"^encoded {documents:,} documents, [\d,]+ bytes, {tokens:,} tokens in [\d.]+ s$", result.stderr, re.M
    )
    assert "━" not in result.stderr + result.stdout  # no bar
    assert f"wrote {out} (uint16)\n" in result.stdout  # the summary stays on stdout, one line however long


def test_prepare_progress_lines_say_documents_bytes_and_tokens(capsys):
    from alilama_core.app.encode_progress import EncodeProgress
    from alilama_core.app.prepare import SplitStats

    splits = {"train": vars(SplitStats(tokens=500, bytes=1800, documents=9)), "val": vars(SplitStats(40, 200, 1))}
    with EncodeProgress(["a.txt", "b/"], 2000, bar=False, every_s=0) as report:
        report.update(SplitStats(tokens=270, bytes=1000, documents=5))
        report.update(SplitStats(tokens=540, bytes=2000, documents=10))
        report.finish({"splits": splits})
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "encode: reading a.txt, b/ (2,000 bytes)"
    assert lines[1].startswith("encode: 5 documents, 1,000 bytes, 270 tokens (50% of the input), ")
    assert lines[2].startswith("encode: 10 documents, 2,000 bytes, 540 tokens (100% of the input), ")
    assert lines[3].startswith("encoded 10 documents, 2,000 bytes, 540 tokens in ")
    assert len(lines) == 4
    with EncodeProgress(["hf:roneneldan/TinyStories"], None, bar=False, every_s=3600) as report:
        report.update(SplitStats(tokens=1, bytes=1, documents=1))  # too soon after the start: no line
    assert capsys.readouterr().err.splitlines() == ["encode: reading hf:roneneldan/TinyStories"]
