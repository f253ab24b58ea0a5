"""Files and folders written with the user's umask; lock files removed on release without breaking exclusion."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alilama_core.base.errors import FolderBusyError, OutputError
from alilama_core.base.files import (
    _umask,
    atomic_open,
    atomic_write_text,
    exclusive_lock,
    file_mode,
    folder_mode,
    make_temp_folder,
    replace_folder,
)

posix = pytest.mark.skipif(os.name != "posix", reason="POSIX modes and flock")


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@posix
def test_umask_is_read_without_changing_it(umask022):
    assert _umask() == 0o022
    assert os.umask(0o022) == 0o022  # unchanged
    assert file_mode() == 0o644 and folder_mode() == 0o755


@posix
def test_atomic_write_text_gives_0644_under_umask_022(tmp_path, umask022):
    path = tmp_path / "out" / "a.txt"
    atomic_write_text(path, "hello\n")
    assert path.read_text() == "hello\n"
    assert _mode(path) == 0o644
    with atomic_open(tmp_path / "b.bin", "wb") as f:
        f.write(b"x")
    assert _mode(tmp_path / "b.bin") == 0o644
    assert not [p for p in tmp_path.rglob("*.tmp")]


@posix
def test_atomic_write_follows_another_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.txt") == 0o640


@posix
def test_temp_folders_get_the_usual_mode(tmp_path, umask022):
    folder = make_temp_folder(tmp_path, prefix=".out.")
    assert folder.is_dir() and folder.parent == tmp_path and folder.name.endswith(".tmp")
    assert _mode(folder) == 0o755


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_replace_folder_swaps_a_finished_folder_in_whole(tmp_path, monkeypatch, exchange):
    import alilama_core.base.files as files

    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    first = make_temp_folder(tmp_path, prefix=".out.")
    (first / "a.txt").write_text("old")
    replace_folder(first, out)  # no folder there yet
    second = make_temp_folder(tmp_path, prefix=".out.")
    (second / "b.txt").write_text("new")
    replace_folder(second, out)
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the old folder and the temporaries are gone


def test_replace_folder_puts_the_old_folder_back_when_the_swap_fails(tmp_path, monkeypatch):
    import alilama_core.base.files as files

    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old")
    with pytest.raises(FileNotFoundError):
        replace_folder(tmp_path / "missing", out)
    assert (out / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_lock_files_are_gone_after_the_block(tmp_path):
    out = tmp_path / "run"
    with exclusive_lock(out, "run") as held:
        assert held == out
        if os.name == "posix":
            assert (tmp_path / ".run.lock.pid").read_text().strip() == str(os.getpid())
    if os.name == "posix":
        assert sorted(p.name for p in tmp_path.iterdir()) == []
    with exclusive_lock(out, "run"):  # and the lock can be taken again
        pass


def test_lock_files_are_gone_after_an_error(tmp_path):
    with pytest.raises(RuntimeError), exclusive_lock(tmp_path / "run", "run"):
        raise RuntimeError("boom")
    if os.name == "posix":
        assert list(tmp_path.iterdir()) == []


def test_a_second_holder_in_the_same_process_is_refused(tmp_path):
    with exclusive_lock(tmp_path / "run", "run"):
        with pytest.raises(FolderBusyError, match=rf"PID {os.getpid()}"):
            with exclusive_lock(tmp_path / "run", "run"):
                pass


def test_a_parent_that_is_a_file_is_an_output_error(tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(OutputError, match="a-file"):
        with exclusive_lock(tmp_path / "a-file" / "data", "data folder"):
            pass


_HOLD = """
import sys
from alilama_core.base.files import exclusive_lock
with exclusive_lock(sys.argv[1], what="run"):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_another_process_is_refused_with_the_holders_pid(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(FolderBusyError, match=rf"run .* another process \(PID {proc.pid}\)"):
            with exclusive_lock(out, "run"):
                pass
    finally:
        proc.communicate("\n", timeout=30)
    assert proc.returncode == 0
    with exclusive_lock(out, "run"):  # free again once the holder has gone
        pass
    if os.name == "posix":
        assert list(tmp_path.iterdir()) == []


_CONTEND = textwrap.dedent(
    """
    import os, sys
    from alilama_core.base.errors import FolderBusyError
    from alilama_core.base.files import exclusive_lock
    out, marker, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    held = 0
    while held < rounds:
        try:
            with exclusive_lock(out, what="run"):
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fails if two hold the lock
                os.close(fd)
                os.unlink(marker)
                held += 1
        except FolderBusyError:
            pass
    print(held)
    """
)


@posix
def test_contending_processes_exclude_each_other_while_lock_files_come_and_go(tmp_path):
    out, marker = tmp_path / "run", tmp_path / "inside"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONTEND, str(out), str(marker), "150"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (stdout, stderr) in zip(procs, results):
        assert p.returncode == 0, stderr  # a FileExistsError on the marker: two holders at once
        assert stdout.strip() == "150"
    assert list(tmp_path.iterdir()) == []


# -- every file of every export road -------------------------------------------------------------------------

READERS = Path(__file__).resolve().parents[2] / "build" / "envs" / "readers" / "bin" / "python"


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory) -> Path:
    """A tiny run with learned positions: every road exports it (hf natively and as remote code, gguf, onnx)."""
    pytest.importorskip("transformers")
    from alilama_testing import tiny_config

    from alilama_bpe.tokenizer import BPETokenizer
    from alilama_core import build_model
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    text = "Once upon a time, there was a little girl named Lily. She loved to play in the sun. " * 10
    tok = BPETokenizer.train([text], vocab_size=300, special_tokens=["<|endoftext|>"])
    cfg = tiny_config(positional="learned", attention="sdpa", vocab_size=tok.vocab_size, context_length=32)
    run = tmp_path_factory.mktemp("modes") / "run"
    save_weights(build_model(cfg), run / "final")
    save(Config(model=cfg), run / "config.yaml")
    tok.save(run / "tokenizer")
    return run


def _export_hf(run: Path, out: Path, format: str = "auto") -> None:
    from alilama_exporters.hf_folder import export

    export(run, out, format=format)


def _export_gguf(run: Path, out: Path) -> None:
    pytest.importorskip("gguf")
    from alilama_exporters.gguf_file import export_gguf

    out.mkdir()
    export_gguf(run, out / "model.gguf", modelfile=True)


def _export_onnx(run: Path, out: Path) -> None:
    if not READERS.exists():
        pytest.skip(f"export onnx runs optimum in {READERS} (make readers builds it)")
    from alilama_exporters.onnx_export import export_onnx

    export_onnx(run, out, python=str(READERS))


ROADS = {
    "hf": _export_hf,
    "hf remote-code": lambda run, out: _export_hf(run, out, "remote-code"),
    "gguf and its Modelfile": _export_gguf,
    "onnx": _export_onnx,
}


@posix
@pytest.mark.parametrize(
    "road",
    [pytest.param(r, marks=pytest.mark.slow) if r == "onnx" else r for r in ROADS],  # onnx: torch.onnx export
)
def test_every_file_of_every_export_follows_the_umask(road, learned_run, tmp_path):
    """Under umask 027: files 0640, folders 0750 (safetensors alone used to leave model.safetensors 0600)."""
    old = os.umask(0o027)
    try:
        ROADS[road](learned_run, tmp_path / "out")
    finally:
        os.umask(old)
    written = list((tmp_path / "out").rglob("*"))
    assert any(p.name in ("model.safetensors", "model.gguf", "model.onnx") for p in written), written
    modes = {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in [tmp_path / "out", *written]}
    assert modes == {k: oct(0o750 if (tmp_path / k).is_dir() else 0o640) for k in modes}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary or lock file left beside
