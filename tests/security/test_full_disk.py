"""A full disk is one ``error:`` line: where, what to free, how to go on; nothing half-written under a final name.

Each case mounts a real 3 MB tmpfs (so the test needs root and ``mount``; it is
skipped, saying so, where mounting is not permitted), fills it with a filler
file that leaves a chosen number of bytes, and runs ``alilama train``,
``alilama data prepare`` or an ``alilama export`` road (hf, gguf, onnx) with its
output there. The writes then fail inside torch's zip writer, safetensors, numpy
(the gguf package's writer), Python's own files or optimum's ONNX writer in
another process, each of which reports a full disk in its own words.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_bad_inputs import TINY, base, cli  # noqa: F401  (base: the shared tiny workspace fixture)

from alilama_core.runs.checkpoint import WEIGHTS, checkpoints, load_run

PAGE = 4096
SIZE = 3 << 20


class Disk:
    """A small tmpfs mounted at ``path``, and a filler file that takes all but a chosen amount of its space."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def free(self) -> int:
        return shutil.disk_usage(self.path).free

    def fill(self, leave: int) -> None:
        """Leave about ``leave`` bytes free (rounded to pages, as tmpfs counts them)."""
        take = max(self.free() - leave, 0)
        with open(self.filler, "ab") as f:
            f.write(b"\0" * take)
        assert abs(self.free() - leave) <= PAGE or take == 0, (self.free(), leave)

    def empty_filler(self) -> None:
        self.filler.unlink()

    def leftovers(self) -> list[str]:
        """Temporary files and folders left anywhere on the disk."""
        return sorted(str(p.relative_to(self.path)) for p in self.path.rglob("*.tmp"))


@pytest.fixture
def disk(tmp_path) -> Disk:
    if shutil.which("mount") is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("the full-disk tests mount a 3 MB tmpfs: they need root and the mount command")
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode(errors='replace').strip()}); run as root")
    try:
        yield Disk(where)
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=True)


def on_disk(path: Path) -> int:
    """Bytes ``path`` (a file or folder) takes on a tmpfs: each file rounded up to whole pages."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(-(-p.stat().st_size // PAGE) * PAGE for p in files)


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def assert_one_disk_full_line(result, *phrases: str) -> str:
    """Non-zero exit, no traceback or unhandled exception, and exactly one ``error:`` line saying the disk is full."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.output
    line = errors[0]
    assert "the disk is full (No space left on device)" in line, line
    assert "Free space there" in line, line
    for phrase in phrases:
        assert phrase in line, line
    return line


# -- the libraries' own words -----------------------------------------------------------------------------------


def test_each_library_s_report_of_a_full_disk_is_recognised(disk):
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from alilama_core.base.files import disk_full_reason

    tensors = {"w": torch.zeros(1 << 20)}  # 4 MB: more than the whole disk
    writes = {
        "torch": lambda path: torch.save(tensors, path),  # RuntimeError: ... unexpected pos N vs M (and maybe
        # the OSError behind it, maybe only "basic_ios::clear: iostream error")
        "safetensors": lambda path: save_file(tensors, path),  # SafetensorError: ... (os error 28)
        "numpy": lambda path: np.zeros(1 << 20, np.float32).tofile(path),  # OSError: N requested and M written
        "python": lambda path: Path(path).write_bytes(bytes(4 << 20)),  # OSError: [Errno 28]
    }
    caught = {}
    for name, write in writes.items():
        path = disk.path / f"{name}.out"
        with pytest.raises(Exception) as info:
            write(path)
        assert disk_full_reason(info.value, path) == "No space left on device", (name, info.value)
        caught[name] = (info.value, path)
        error = info.value
        while error is not None:  # the frames hold the writers, and they the files open (their space taken)
            error.__traceback__, error = None, error.__context__
        del info
        gc.collect()
        path.unlink(missing_ok=True)
        assert disk.free() > SIZE - 16 * PAGE, name
    # A short write said without a reason counts as a full disk only while the disk is in fact (nearly) full.
    disk.fill(0)
    disk.empty_filler()
    numpy_error, path = caught["numpy"]
    assert numpy_error.errno is None and numpy_error.__context__ is None  # "N requested and M written", no more
    assert disk_full_reason(numpy_error, path) is None
    assert disk_full_reason(caught["python"][0], path) == "No space left on device"  # its errno says so
    assert disk_full_reason(ValueError("a bad value"), path) is None


# -- train ------------------------------------------------------------------------------------------------------


ARGS = [*TINY, "train.max_steps=6"]  # as the base fixture trained its run: its weights are the reference


@pytest.mark.parametrize("fails_in", ["weights", "optimizer"])
def test_a_full_disk_at_a_checkpoint_stops_training_cleanly_and_resume_is_bit_identical(
    base,  # noqa: F811
    disk,
    fails_in,
):
    """The disk fills while step 4's checkpoint is written: in model.safetensors (Python's own write, which keeps
    the errno) or in optimizer.pt (torch's zip writer, which says only "unexpected pos")."""
    ref = base / "run"
    checkpoint = on_disk(ref / "step-00000004")
    weights = on_disk(ref / "step-00000004" / WEIGHTS)
    start = sum(on_disk(ref / name) for name in ("config.yaml", "run.json", "tokenizer", ".alilama-output"))
    # Room for the new run folder, its metrics and one checkpoint (step 2), but not for the next one (step 4).
    extra = weights // 2 if fails_in == "weights" else weights + (checkpoint - weights) // 3
    disk.fill(start + 8 * PAGE + checkpoint + extra)
    run = disk.path / "run"
    result = cli("train", *ARGS, "--data", str(base / "data"), "--out", str(run))
    line = assert_one_disk_full_line(
        result,
        f"while writing the checkpoint {str(run / 'step-00000004')!r}",
        f"on the file system mounted at {str(disk.path)!r}",
        f"`alilama train --resume {run}` to continue from step-00000002",
    )
    assert "each checkpoint takes about 0." in line  # what to free, roughly
    # Nothing half-written under a final name: one complete checkpoint, no final, no temporary folder.
    assert [p.name for p in checkpoints(run)] == ["step-00000002"]
    assert not (run / "final").exists()
    assert disk.leftovers() == []
    loaded = load_run(run)  # its hashes verified
    assert loaded.checkpoint.name == "step-00000002"
    assert sorted(p.name for p in loaded.checkpoint.iterdir()) == sorted(
        [WEIGHTS, "optimizer.pt", "rng.pt", "state.json"]
    )

    disk.empty_filler()
    resumed = cli("train", "--resume", str(run), "--no-progress")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming from step-00000002" in resumed.output
    assert (run / "final" / WEIGHTS).read_bytes() == (ref / "final" / WEIGHTS).read_bytes()  # bit for bit

    def losses(path: Path) -> dict:
        rows = map(json.loads, (path / "metrics.jsonl").read_text().splitlines())
        return {r["step"]: r["train_loss"] for r in rows}

    assert losses(run) == losses(ref)
    assert disk.leftovers() == []


def test_a_disk_too_full_to_start_a_run_leaves_no_run_folder(base, disk):  # noqa: F811
    disk.fill(0)
    run = disk.path / "run"
    result = cli("train", *ARGS, "--data", str(base / "data"), "--out", str(run))
    assert_one_disk_full_line(result, "then run the same command again")
    assert not run.exists()
    assert disk.leftovers() == []


# -- data prepare -----------------------------------------------------------------------------------------------


def _prepare(root: Path, out: Path, *extra: str):
    corpus, tok = str(root / "corpus.txt"), str(root / "tok")
    return cli(
        "data", "prepare", "--input", corpus, "--tokenizer", tok, "--out", str(out), "--val-fraction", "0.1", *extra
    )


@pytest.mark.parametrize("share", [0.0, 0.3, 0.7, 0.95])
def test_a_full_disk_during_data_prepare_leaves_no_data_folder(base, disk, share):  # noqa: F811
    """``share``: the part of the data folder's size that fits (so the write fails in train.bin, val.bin, meta...)."""
    disk.fill(int(on_disk(base / "data") * share))
    out = disk.path / "data"
    result = _prepare(base, out)
    assert_one_disk_full_line(result, f"while writing the data folder {str(out)!r}", "then run the same command again")
    assert not out.exists()
    assert disk.leftovers() == []

    disk.empty_filler()
    again = _prepare(base, out)
    assert again.exit_code == 0, again.output
    assert digest(out) == digest(base / "data")


def test_a_full_disk_during_data_prepare_overwrite_keeps_the_old_folder(base, disk):  # noqa: F811
    out = disk.path / "data"
    assert _prepare(base, out).exit_code == 0
    before = digest(out)
    disk.fill(on_disk(out) // 2)
    result = _prepare(base, out, "--overwrite")
    assert_one_disk_full_line(result, f"while writing the data folder {str(out)!r}")
    assert digest(out) == before
    assert disk.leftovers() == []


# -- export hf --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export_size(base, tmp_path_factory) -> int:  # noqa: F811
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("export") / "hf"
    result = cli("export", "hf", str(base / "run"), str(out))
    assert result.exit_code == 0, result.output
    return on_disk(out)


@pytest.mark.parametrize("share", [0.0, 0.02, 0.5, 0.97])
def test_a_full_disk_during_export_leaves_no_export_folder(base, disk, export_size, share):  # noqa: F811
    """``share``: the part of the export's size that fits (the write fails in config.json, the weights, the card...)."""
    disk.fill(int(export_size * share))
    out = disk.path / "hf"
    result = cli("export", "hf", str(base / "run"), str(out))
    assert_one_disk_full_line(
        result, f"while writing the export folder {str(out)!r}", "then run the same command again"
    )
    assert not out.exists()  # no folder that transformers would load as a model
    assert disk.leftovers() == []

    disk.empty_filler()
    again = cli("export", "hf", str(base / "run"), str(out))
    assert again.exit_code == 0, again.output
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()


def test_a_full_disk_during_export_force_keeps_the_old_export(base, disk, export_size):  # noqa: F811
    out = disk.path / "hf"
    assert cli("export", "hf", str(base / "run"), str(out)).exit_code == 0
    before = digest(out)
    disk.fill(export_size // 2)
    result = cli("export", "hf", str(base / "run"), str(out), "--force", "--format", "remote-code")
    assert_one_disk_full_line(result, f"while writing the export folder {str(out)!r}")
    assert digest(out) == before
    assert disk.leftovers() == []


# -- export gguf ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gguf_size(base, tmp_path_factory) -> int:  # noqa: F811
    pytest.importorskip("gguf")
    out = tmp_path_factory.mktemp("gguf") / "model.gguf"
    result = cli("export", "gguf", str(base / "run"), str(out), "--no-progress")
    assert result.exit_code == 0, result.output
    return on_disk(out)


@pytest.mark.parametrize("share", [0.0, 0.001, 0.3, 0.9, 0.99])
def test_a_full_disk_during_export_gguf_leaves_no_file(base, disk, gguf_size, share):  # noqa: F811
    """``share``: the part of the file that fits (the write fails in the header, the vocabulary, the tensors...)."""
    disk.fill(int(gguf_size * share))
    out = disk.path / "model.gguf"
    args = ["export", "gguf", str(base / "run"), str(out), "--modelfile", "--no-progress"]
    assert_one_disk_full_line(
        cli(*args), f"while writing the GGUF file {str(out)!r}", "then run the same command again"
    )
    assert not out.exists() and not (disk.path / "Modelfile").exists()
    assert disk.leftovers() == []

    disk.empty_filler()
    again = cli(*args)
    assert again.exit_code == 0, again.output
    assert out.read_bytes()[:4] == b"GGUF" and (disk.path / "Modelfile").is_file()


def test_a_full_disk_during_export_gguf_force_keeps_the_old_file(base, disk, gguf_size):  # noqa: F811
    out = disk.path / "model.gguf"
    assert cli("export", "gguf", str(base / "run"), str(out), "--no-progress").exit_code == 0
    before = out.read_bytes()
    disk.fill(gguf_size // 2)
    result = cli("export", "gguf", str(base / "run"), str(out), "--force", "--dtype", "f16", "--no-progress")
    assert_one_disk_full_line(result, f"while writing the GGUF file {str(out)!r}")
    assert out.read_bytes() == before
    assert disk.leftovers() == []


# -- export onnx ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rope_run(base) -> Path:  # noqa: F811
    """A run that optimum exports (RoPE: transformers' GPT-NeoX), beside the base run."""
    run = base / "rope-run"
    if not run.exists():
        args = [*ARGS, "model.positional=rope", "--data", str(base / "data"), "--out", str(run)]
        result = cli("train", *args)
        assert result.exit_code == 0, result.output
    return run


@pytest.fixture(scope="module")
def onnx_python() -> str:
    readers = Path(__file__).resolve().parents[2] / "build" / "envs" / "readers" / "bin" / "python"
    if not readers.exists():
        pytest.skip(f"export onnx runs optimum in {readers} (make readers builds it)")
    return str(readers)


@pytest.fixture(scope="module")
def onnx_size(rope_run, onnx_python, tmp_path_factory) -> int:
    out = tmp_path_factory.mktemp("onnx") / "onnx"
    result = cli("export", "onnx", str(rope_run), str(out), "--python", onnx_python, "--no-progress")
    assert result.exit_code == 0, result.output
    return on_disk(out)


@pytest.mark.parametrize("share", [0.0, 0.6])
def test_a_full_disk_during_export_onnx_leaves_no_folder(rope_run, disk, onnx_python, onnx_size, share):
    """``share``: the part of the folder that fits (the write fails in the ONNX file, or in what optimum writes after)."""
    disk.fill(int(onnx_size * share))
    out = disk.path / "onnx"
    result = cli("export", "onnx", str(rope_run), str(out), "--python", onnx_python, "--no-progress")
    assert_one_disk_full_line(result, f"while writing the ONNX export {str(out)!r}", "then run the same command again")
    assert not out.exists()
    assert disk.leftovers() == []
