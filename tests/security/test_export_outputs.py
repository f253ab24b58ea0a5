"""Where ``alilama export`` may write, one table row each: an output is never an input, nor a device, a FIFO, a link.

Each case is a command line, the exit code it must give, a phrase of its error,
and files that must survive byte for byte (a device node and a FIFO must still be
one). Every export road (hf, gguf with its Modelfile, onnx) goes through one
check (``alilama_core.runs.outputs.check_export``), so the cases mix them. The
cases run in-process on a private copy of a tiny trained run; the kill test
uses a real process.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_bad_inputs import base, cli, ws  # noqa: F401  (base, ws: the shared tiny workspace fixtures)

pytest.importorskip("gguf")

GGUF = b"GGUF, an earlier export"  # what --force may replace: a file that starts as a GGUF file does


@dataclass
class Case:
    name: str
    args: list[str]
    code: int
    phrase: str
    keep: list[str] = field(default_factory=list)
    """Files (relative to the workspace) that must be byte-identical afterwards; folders: every file in them."""
    setup: Callable[[Path], None] | None = None
    absent: list[str] = field(default_factory=list)
    """Paths that must not exist afterwards."""


def _file(path: str, data: bytes = GGUF):
    def setup(root: Path) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)

    return setup


def _device(path: str):
    def setup(root: Path) -> None:
        os.mknod(root / path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers, in the workspace

    return setup


def _fifo(path: str):
    return lambda root: os.mkfifo(root / path)


def _link(path: str, target: str):
    return lambda root: os.symlink(root / target, root / path)


def _copy_run(name: str):
    def setup(root: Path) -> None:
        import shutil

        shutil.copytree(root / "run", root / name)

    return setup


def _marked(path: str, kind: str):
    def setup(root: Path) -> None:
        from alilama_core.runs.outputs import mark

        (root / path).mkdir()
        (root / path / "config.json").write_text("{}")
        mark(root / path, kind)

    return setup


def _flip_a_bit(root: Path) -> None:
    path = root / "run" / "final" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10
    path.write_bytes(bytes(data))


RUN_FILES = ["run/final/model.safetensors", "run/config.yaml", "run/run.json", "run/tokenizer"]
root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod needs root")
"""The device-node cases: only root may make one."""

CASES = [
    # -- gguf: the run it reads ----------------------------------------------------------------------------
    Case("gguf --force onto the run's weights", ["export", "gguf", "run", "run/final/model.safetensors", "--force"],
         1, "lies inside the run 'run'; writing there could destroy the run", RUN_FILES),
    Case("gguf --force onto the run's config", ["export", "gguf", "run", "run/config.yaml", "--force"],
         1, "lies inside the run", RUN_FILES),
    Case("gguf into the run folder", ["export", "gguf", "run", "run/model.gguf"], 1, "lies inside the run",
         RUN_FILES, absent=["run/model.gguf"]),
    Case("gguf onto the run folder itself", ["export", "gguf", "run", "run", "--force"], 1, "is the run 'run'",
         RUN_FILES),
    Case("gguf --force through a link to the run's weights", ["export", "gguf", "run", "w.gguf", "--force"], 1,
         "lies inside the run", RUN_FILES, setup=_link("w.gguf", "run/final/model.safetensors")),
    # -- gguf: what --force may replace --------------------------------------------------------------------
    Case("gguf --force onto a device node", ["export", "gguf", "run", "null", "--force"], 1,
         "is a character device; --overwrite replaces only a regular file", setup=_device("null")),
    Case("gguf --force onto a FIFO", ["export", "gguf", "run", "pipe", "--force"], 1, "is a FIFO",
         setup=_fifo("pipe")),
    Case("gguf --force onto a link to a file outside", ["export", "gguf", "run", "link.gguf", "--force"], 1,
         "is a symbolic link", ["elsewhere/model.gguf"],
         setup=lambda root: (_file("elsewhere/model.gguf")(root), _link("link.gguf", "elsewhere/model.gguf")(root))),
    Case("gguf --force onto a user's file", ["export", "gguf", "run", "notes.txt", "--force"], 1,
         "--overwrite replaces only a GGUF file, and 'notes.txt' is not one; nothing was deleted", ["notes.txt"],
         setup=_file("notes.txt", b"my notes")),
    Case("gguf onto an existing GGUF file", ["export", "gguf", "run", "old.gguf"], 1,
         "exists; pass --overwrite to replace it, or choose another OUT", ["old.gguf"], setup=_file("old.gguf")),
    Case("gguf onto a user's file", ["export", "gguf", "run", "notes.txt"], 1,
         "'notes.txt' exists; choose another OUT", ["notes.txt"], setup=_file("notes.txt", b"my notes")),
    Case("gguf --force onto a folder", ["export", "gguf", "run", "data", "--force"], 1, "is a folder", ["data"]),
    Case("gguf --modelfile --force onto a user's Modelfile", ["export", "gguf", "run", "m.gguf", "--modelfile",
         "--force"], 1, "--overwrite replaces only an ollama Modelfile", ["Modelfile"],
         setup=_file("Modelfile", b"FROM llama3\n"), absent=["m.gguf"]),
    # -- any road: inside another folder Alilama writes ----------------------------------------------------
    Case("gguf into a data folder", ["export", "gguf", "run", "data/model.gguf"], 1,
         "lies inside", ["data"], absent=["data/model.gguf"]),
    Case("gguf into another run", ["export", "gguf", "run", "other/model.gguf"], 1,
         "a run that holds only the files Alilama writes there", ["other"], setup=_copy_run("other"),
         absent=["other/model.gguf"]),
    Case("hf into the run", ["export", "hf", "run", "run/hf"], 1, "lies inside the run", RUN_FILES,
         absent=["run/hf"]),
    Case("hf --force onto a data folder", ["export", "hf", "run", "data", "--force"], 1,
         "--overwrite replaces only a Hugging Face export that Alilama wrote, and 'data' holds a data folder; nothing "
         "was deleted", ["data"]),
    Case("hf --force onto a device node", ["export", "hf", "run", "null", "--force"], 1, "is a file, not a folder",
         setup=_device("null")),
    Case("hf inside an ONNX export", ["export", "hf", "run", "onnx/hf"], 1, "lies inside", ["onnx"],
         setup=_marked("onnx", "onnx"), absent=["onnx/hf"]),
    Case("onnx onto the run", ["export", "onnx", "run", "run", "--force"], 1, "is the run 'run'", RUN_FILES),
    Case("onnx over its own export: the advice names --overwrite", ["export", "onnx", "run", "onnx"], 1,
         "already holds an ONNX export; pass --overwrite to replace it, or choose another OUT", ["onnx"],
         setup=_marked("onnx", "onnx")),
    Case("onnx --force onto a FIFO", ["export", "onnx", "run", "pipe", "--force"], 1, "is a file, not a folder",
         setup=_fifo("pipe")),
    # -- a run that fails its integrity check: export has no --no-verify -----------------------------------
    Case("export of a run whose weights changed", ["export", "gguf", "run", "m.gguf"], 1,
         "pass --no-verify (generate, eval; an export always checks)", ["run/final/model.safetensors"],
         setup=_flip_a_bit, absent=["m.gguf"]),
]  # fmt: skip


def digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.name, marks=root_only if "device" in c.name else ()) for c in CASES]
)
def test_case(case: Case, ws: Path):  # noqa: F811
    if case.setup is not None:
        case.setup(ws)
    before = {k: digest(ws / k) for k in case.keep}
    specials = {p: os.lstat(p).st_mode for p in ws.iterdir() if not stat.S_ISREG(os.lstat(p).st_mode)}
    result = cli(*case.args, cwd=ws)
    output = " ".join(result.output.split())
    assert result.exit_code == case.code, result.output
    assert "Traceback" not in result.output and (result.exception is None or isinstance(result.exception, SystemExit))
    assert case.phrase in output, output
    assert output.startswith("error: ") and output.count("error:") == 1, output
    # the advice names the flag the commands document (--force is only its old alias) and no option export lacks
    assert "--force" not in output and "pass --no-verify to" not in output
    for k, files in before.items():
        assert digest(ws / k) == files, k
    for path, mode in specials.items():  # device nodes, FIFOs, links and folders are what they were
        assert stat.S_IFMT(os.lstat(path).st_mode) == stat.S_IFMT(mode), path
    for path in case.absent:
        assert not (ws / path).exists(), path
    assert not list(ws.glob(".*.tmp")) and not list(ws.glob(".*.lock"))


# -- temporaries left by a killed export ----------------------------------------------------------------------

# Runs ``alilama ARGS``; the GGUF export kills itself once the file is written, before it is renamed onto OUT.
KILLED = """
import os, signal
from alilama_exporters.gguf_file import GGUFExporter

real = GGUFExporter.write

def write(self, *args, **kw):
    real(self, *args, **kw)
    os.kill(os.getpid(), signal.SIGKILL)

GGUFExporter.write = write
from alilama_core.app.cli import main
main()
"""


def test_a_killed_gguf_export_leaves_its_temporary_and_the_next_export_removes_it(ws):  # noqa: F811
    out = ws / "model.gguf"
    out.write_bytes(GGUF)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED, "export", "gguf", "run", str(out), "--force", "--modelfile"],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert out.read_bytes() == GGUF and not (ws / "Modelfile").exists()  # the old file, whole; no Modelfile yet
    left = sorted(p.name for p in ws.glob(".*.tmp"))
    assert len(left) == 2 and all(f".{killed_pid(left)}." in name for name in left), left
    # an older version's leftover (.OUT.PID.checking) of a process that is gone, and one of a live process
    (ws / f".model.gguf.{killed_pid(left)}.checking").write_bytes(b"GGUF, half")
    (ws / f".model.gguf.{os.getppid()}.abc123.tmp").write_bytes(b"a running writer's")

    again = cli("export", "gguf", "run", str(out), "--force", "--modelfile", cwd=ws)
    assert again.exit_code == 0, again.output
    assert out.read_bytes()[:4] == b"GGUF" and out.read_bytes() != GGUF and (ws / "Modelfile").is_file()
    assert sorted(p.name for p in ws.iterdir() if p.name.startswith(".")) == [f".model.gguf.{os.getppid()}.abc123.tmp"]
    assert cli("export", "gguf", "run", str(out), "--force", "--modelfile", cwd=ws).exit_code == 0  # its own Modelfile


def killed_pid(names: list[str]) -> int:
    """The PID in ``.NAME.PID.XXXX.tmp``."""
    return int(names[0].rsplit(".", 3)[1])
