"""``alilama export hf`` writes its folder as runs and data folders are written: built beside, swapped in, locked.

A kill in the middle leaves the old export (or none) under OUT, never a partial
folder that transformers would load; a second export to the same OUT fails at
once naming the first; ``--force`` replaces only an export Alilama wrote and
leaves no temporary folder behind. The kills and the second writer are real
processes.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alilama_core.app.cli import get_app
from alilama_core.runs.outputs import MARKER, foreign_entries, kind_of

# Runs ``alilama ARGS``; with PAUSE set, the export stops after writing the weights (before the tokenizer)
# and either kills itself (PAUSE=kill) or says so in READY and waits for the file GO (PAUSE=hold).
EXPORT = """
import os, signal, sys, time
from pathlib import Path
import alilama_exporters.hf_folder as export

real = export.write_tokenizer

def write_tokenizer(tok, out, **kw):
    assert (Path(out) / "model.safetensors").is_file()  # the folder already holds loadable weights
    if os.environ["PAUSE"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    Path(os.environ["READY"]).write_text(str(out))
    deadline = time.time() + 120
    while not Path(os.environ["GO"]).exists() and time.time() < deadline:
        time.sleep(0.05)
    return real(tok, out, **kw)

export.write_tokenizer = write_tokenizer
from alilama_core.app.cli import main
main()
"""


def cli(*args: str):
    return CliRunner().invoke(get_app(), list(args), catch_exceptions=True)


def alilama(*args: str, cwd: Path, **env: str) -> subprocess.Popen:
    import os

    return subprocess.Popen(
        [sys.executable, "-c", EXPORT, *args],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def temporaries(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(".tmp"))


def loads(out: Path) -> None:
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    ids = AutoTokenizer.from_pretrained(out)("Once upon a time", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


@pytest.fixture(scope="module")
def run(runs) -> Path:
    return runs["rope"]  # exports as transformers' GPT-NeoX


def test_an_export_is_marked_and_holds_only_its_own_files(run, tmp_path):
    out = tmp_path / "hf"
    result = cli("export", "hf", str(run), str(out))
    assert result.exit_code == 0, result.output
    assert kind_of(out) == "hf" and foreign_entries(out, "hf") == []
    assert MARKER not in result.output  # the listing shows the model's files only
    assert temporaries(tmp_path) == []
    loads(out)


def test_a_kill_during_an_export_leaves_no_folder_under_out(run, tmp_path):
    out = tmp_path / "hf"
    killed = alilama("export", "hf", str(run), str(out), cwd=tmp_path, PAUSE="kill")
    killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists()  # nothing that transformers would load as a model
    (left,) = temporaries(tmp_path)  # the half-written folder stayed beside, under a hidden temporary name
    assert (tmp_path / left / "model.safetensors").is_file() and not (tmp_path / left / "tokenizer.json").exists()

    again = cli("export", "hf", str(run), str(out))
    assert again.exit_code == 0, again.output
    assert temporaries(tmp_path) == []  # the next export removed it
    loads(out)


def test_a_kill_during_export_force_keeps_the_old_export_and_the_next_force_cleans_up(run, tmp_path):
    out = tmp_path / "hf"
    assert cli("export", "hf", str(run), str(out)).exit_code == 0
    before = digest(out)
    killed = alilama(
        "export", "hf", str(run), str(out), "--force", "--format", "remote-code", cwd=tmp_path, PAUSE="kill"
    )
    _, err = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, err
    assert digest(out) == before  # the old export, whole
    assert len(temporaries(tmp_path)) == 1

    forced = cli("export", "hf", str(run), str(out), "--force", "--format", "remote-code")
    assert forced.exit_code == 0 and "as remote-code" in forced.output, forced.output
    assert temporaries(tmp_path) == []  # neither the killed export's folder nor the old one stays
    assert (out / "modeling_alilama.py").is_file() and (out / "attention_math.py").is_file()
    assert foreign_entries(out, "hf") == []
    loads(out)


def test_a_second_export_to_the_same_folder_fails_at_once_naming_the_first(run, tmp_path):
    out, ready, go = tmp_path / "hf", tmp_path / "ready", tmp_path / "go"
    first = alilama(
        "export", "hf", str(run), str(out), "--force", cwd=tmp_path, PAUSE="hold", READY=str(ready), GO=str(go)
    )
    try:
        deadline = time.time() + 240
        while not ready.exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert ready.exists(), first.communicate()
        started = time.perf_counter()
        second = cli("export", "hf", str(run), str(out), "--force")
        assert time.perf_counter() - started < 30
        assert second.exit_code == 1 and "Traceback" not in second.output
        message = " ".join(second.output.split())
        assert f"export folder {str(out)!r} is being written by another process (PID {first.pid})" in message
    finally:
        go.write_text("")
        stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert kind_of(out) == "hf" and temporaries(tmp_path) == []
    loads(out)  # the first export, complete


def test_force_replaces_only_an_export_alilama_wrote(run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    refused = cli("export", "hf", str(run), str(mine), "--force")
    assert refused.exit_code == 1 and "nothing was deleted" in refused.output
    assert (mine / "notes.txt").read_text() == "keep me" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]

    out = tmp_path / "hf"
    assert cli("export", "hf", str(run), str(out)).exit_code == 0
    (out / "notes.txt").write_text("mine too")
    refused = cli("export", "hf", str(run), str(out), "--force")
    assert refused.exit_code == 1 and "notes.txt" in refused.output and "will not delete" in refused.output
    assert (out / "notes.txt").read_text() == "mine too"

    for target in (run, run.parent):  # OUT is the run, or holds it
        refused = cli("export", "hf", str(run), str(target), "--force")
        assert refused.exit_code == 1 and "could destroy the run" in " ".join(refused.output.split())
        assert (run / "final" / "model.safetensors").is_file()


def test_export_outside_a_terminal_names_each_step(run, tmp_path):
    from alilama_testing import ok, run_cli

    from alilama_core.runs.exports import export_steps
    from alilama_exporters.hf_folder import HFExporter

    def steps(*args: str) -> list[str]:
        result = run_cli("export", "hf", str(run), *args)
        assert "exported" in ok(result)  # the summary on stdout, the steps on stderr
        return [line for line in result.stderr.splitlines() if line.startswith("export ")]

    native = steps(str(tmp_path / "native"))
    n = export_steps(HFExporter)
    assert [line.split(":")[0] for line in native] == [f"export {i}/{n}" for i in range(1, n + 1)]
    assert native[0] == f"export 1/{n}: loaded {run} checkpoint final"
    assert native[1].startswith(f"export 2/{n}: format native: logits checked against Alilama's")
    assert native[2] == f"export 3/{n}: wrote the weights and config.json"
    assert native[3].startswith(f"export 4/{n}: converted the tokenizer: tokenizer.json")
    assert native[4] == f"export 5/{n}: wrote the model card: README.md"
    assert native[5].startswith(f"export 6/{n}: read the folder back: transformers ")
    assert "greedy text equal" in native[5]
    remote = steps(str(tmp_path / "remote"), "--format", "remote-code", "--no-progress")
    assert remote[1].startswith(f"export 2/{n}: format remote-code: remote code asked for")
    assert remote[2] == f"export 3/{n}: wrote the weights and config.json and the model code"
    loads(tmp_path / "remote")
