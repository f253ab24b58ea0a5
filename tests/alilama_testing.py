"""Small builders shared by the core tests."""

from __future__ import annotations

import atexit
import json
import locale
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

import pytest
import torch

from alilama_core import ModelConfig, build_model
from alilama_core.kit.common import tiny_model_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = ["alibi", "rope", "learned", "nope"]

# `alilama train` arguments for a tiny text run that evaluates and checkpoints often (add train.max_steps).
TINY_TRAIN = [
    "--preset",
    "tiny",
    "--no-progress",
    "model.vocab_size=300",
    "train.sample_prompts=[Once]",
    "train.eval_every=4",
    "train.checkpoint_every=2",
    "train.log_every=1",
]


def tiny_config(**overrides) -> ModelConfig:
    """The conformance kit's tiny model (2 layers, 4 heads of 8), with room for 1,024 positions."""
    return tiny_model_config(**{"vocab_size": 97, "context_length": 1024, **overrides})


def twin_models(positional: str, attention: str, **overrides):
    """The eager reference and a model with ``attention``, sharing the same weights."""
    torch.manual_seed(0)
    ref = build_model(tiny_config(positional=positional, attention="eager", **overrides))
    other = build_model(tiny_config(positional=positional, attention=attention, **overrides))
    other.load_state_dict(ref.state_dict())
    return ref, other


def available_backends() -> list[str]:
    """Backends that run here and declare exact attention (the ones every test compares with eager)."""
    from alilama_core.contracts.attention import attention_backend
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    backends = {n: attention_backend(reg.get("attention", n)) for n in reg.names("attention")}
    return [n for n, b in backends.items() if b.exact and b.available() is None]


def needs_test_plugins(*distributions: str) -> pytest.MarkDecorator:
    """Skip unless these test-only plugin packages are installed and ``ALILAMA_PLUGINS`` lets every plugin load."""
    missing = []
    for dist in distributions:
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            missing.append(dist)
    return pytest.mark.skipif(
        bool(missing) or os.environ.get("ALILAMA_PLUGINS") is not None,
        reason=f"test plugins not installed ({', '.join(missing) or 'none missing'}; make test builds them into "
        "build/test-plugins, which conftest.py puts on the path), or ALILAMA_PLUGINS limits which plugins load",
    )


GPT2_VOCAB = Path(__file__).resolve().parents[1] / "build" / "vocab" / "whisper-20250625"
"""openai-whisper's files, as ``make test`` installs them: ``whisper/assets/gpt2.tiktoken`` is GPT-2's ranks."""


def gpt2_vocab_package() -> Path:
    """The folder holding openai-whisper's copy of GPT-2's ranks (a ``sys.path`` entry); skipped where
    ``make test`` has not installed it, failed instead under ALILAMA_REQUIRE_GPT2_VOCAB=1 (CI)."""
    if not (GPT2_VOCAB / "whisper" / "assets" / "gpt2.tiktoken").is_file():
        why = f"no copy of GPT-2's vocabulary at {GPT2_VOCAB}: make test installs openai-whisper's files there"
        if os.environ.get("ALILAMA_REQUIRE_GPT2_VOCAB") == "1":
            pytest.fail(f"{why} (ALILAMA_REQUIRE_GPT2_VOCAB is set)")
        pytest.skip(why)
    return GPT2_VOCAB


def run_cli(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """``alilama ARGS`` as a process of its own, its output captured; forked from a server that has imported
    torch and the CLI already (tests/cli_server.py) when one runs with this environment and is free, else a
    fresh interpreter (``ALILAMA_TEST_FRESH_CLI=1``: always)."""
    full_env = {**os.environ, **(env or {})}
    command = [sys.executable, "-c", "from alilama_core.app.cli import main; main()", *args]
    if full_env.get("ALILAMA_TEST_FRESH_CLI") != "1" and _SERVER_LOCK.acquire(blocking=False):
        try:
            return _cli_server(full_env).run(command, timeout)
        finally:
            _SERVER_LOCK.release()
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout)


class ForkServer:
    """A Python process that forks a child for each request: one JSON line in, one JSON line back
    (tests/cli_server.py for commands, the bounds tests' zygote). Its log and scratch files in ``folder``."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path | None = None, folder: Path | None = None):
        self.env = env
        self.folder = folder or Path(tempfile.mkdtemp(prefix="alilama-fork-server-"))
        self.log = open(self.folder / "server.log", "w+", encoding="utf-8")  # noqa: SIM115 - closed in discard()
        self.proc = subprocess.Popen(
            [sys.executable, *args, str(self.folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its children with it, should it have to be killed
        )

    def ask(self, spec: dict, timeout: float) -> dict:
        """Send one request; its answer, or an AssertionError with the server's log if none comes."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(spec) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it has exited: the read below says so
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            self.log.seek(0)
            raise AssertionError(
                f"the fork server did not answer (exit {self.proc.returncode}):\n{self.log.read()[-3000:]}"
            )
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def discard(self) -> None:
        """Stop it and remove its folder."""
        self.close()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class CliServer(ForkServer):
    """tests/cli_server.py, started with one environment; each command a forked child of it."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__([str(Path(__file__).with_name("cli_server.py"))], env)

    def run(self, command: list[str], timeout: float) -> subprocess.CompletedProcess:
        out, err = self.folder / "stdout", self.folder / "stderr"
        spec = {"args": command[3:], "cwd": os.getcwd(), "timeout": timeout, "stdout": str(out), "stderr": str(err)}
        answer = self.ask(spec, timeout + 60)
        encoding = locale.getpreferredencoding(False)
        stdout, stderr = (p.read_text(encoding=encoding) if p.exists() else "" for p in (out, err))
        if answer["killed"]:
            raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(command, answer["exit"], stdout, stderr)


_SERVER: CliServer | None = None
_SERVER_LOCK = threading.Lock()


def _cli_server(env: dict[str, str]) -> CliServer:
    """The server for ``env``: the running one, or a new one in its place (one at a time)."""
    global _SERVER
    if _SERVER is not None and (_SERVER.env != env or _SERVER.proc.poll() is not None):
        _SERVER.discard()
        _SERVER = None
    if _SERVER is None:
        _SERVER = CliServer(env)
        atexit.register(_SERVER.discard)
    return _SERVER


def documented_sweep(page: str, sweep_file: str) -> tuple[list[str], list[str]]:
    """A page's one ``alilama sweep SWEEP_FILE ...`` command line: its words after ``alilama``, and the sweep
    file and overrides alone (its ``--options`` and their values left out), as ``plan_from_args`` takes them."""
    import shlex

    lines = [line for line in page.splitlines() if line.startswith(f"alilama sweep {sweep_file}")]
    assert len(lines) == 1, f"the page shows the one command that ran {sweep_file}"
    args = shlex.split(lines[0].split("#")[0])[1:]
    words, skip = [], False
    for arg in args[1:]:
        if skip or arg.startswith("--"):
            skip = not skip and arg.startswith("--") and "=" not in arg
            continue
        words.append(str(ROOT / arg) if arg.endswith(".yaml") else arg)
    return args, words


def ok(result: subprocess.CompletedProcess) -> str:
    """The stdout of a command that must have succeeded without a traceback."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def killed_and_resumed(args: list[str], run: Path) -> str:
    """Start ``alilama ARGS --out RUN``, SIGKILL it once it has a checkpoint, then ``train --resume`` it; its stdout."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from alilama_core.app.cli import main; main()", *args, "--out", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not list(run.glob("step-*/state.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert list(run.glob("step-*")), "the run wrote no checkpoint before it was killed"
    if killed:
        assert not (run / "final").exists()
    out = ok(run_cli("train", "--resume", str(run), "--no-progress"))
    assert "resuming from step-" in out
    return out


def run_ddp(out: Path, args: list[str], port: int, timeout: int = 600) -> subprocess.CompletedProcess:
    """``alilama train --out OUT ARGS`` in two processes under torchrun (gloo on CPU, one thread each)."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}"]
        + ["-m", "alilama_core", "train", "--out", str(out), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=timeout,
    )


def losses(run: Path) -> dict[int, float]:
    """Training loss by step from a run's metrics.jsonl."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["train_loss"] for r in rows if "train_loss" in r}


# The first statements of a process that plays a machine without Alilama: no alilama* module imports.
NO_ALILAMA = """
import sys
class NoAlilama:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0].startswith("alilama"):
            raise ImportError(f"{name} is blocked: this process plays a machine without Alilama")
sys.meta_path.insert(0, NoAlilama())
"""
