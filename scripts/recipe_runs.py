"""Training runs for the recipe table: ``alilama train`` in subprocesses, read back.

``scripts/bench_recipe.py`` (the ``essay`` recipe against ``fast`` at equal
tokens) trains through the CLI a user runs, one torch thread per run, some
runs side by side, and reads each run's ``metrics.jsonl``. A run folder that
already finished is read, not trained again, so an interrupted study resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALILAMA = [str(Path(sys.executable).with_name("alilama"))]  # the console script beside this Python
TOKENS_PER_STEP = 32 * 128  # the essay's batch: 32 windows of 128 tokens
MI = 1 << 20
"""Token budgets are counted in 2^20 tokens (256 steps of the essay's batch)."""


@dataclass
class Run:
    """One training run: a preset, overrides, and where it goes."""

    name: str
    preset: str
    overrides: list[str] = field(default_factory=list)
    seed: int = 0
    tokens: int = MI

    @property
    def steps(self) -> int:
        return self.tokens // TOKENS_PER_STEP

    def folder(self, root: Path) -> Path:
        """``NAME-sSEED-NMi-HASH``: the hash of the preset and overrides keeps other settings apart."""
        digest = hashlib.sha256(json.dumps([self.preset, self.overrides]).encode()).hexdigest()[:8]
        return root / f"{self.name}-s{self.seed}-{self.tokens // MI}Mi-{digest}"


def train_args(run: Run, data: Path, out: Path, eval_every: int | None, threads: int) -> list[str]:
    """The ``alilama train`` command line of ``run``: all of validation at each evaluation, no samples."""
    return [
        *ALILAMA,
        "train",
        "--preset",
        run.preset,
        "--data",
        str(data),
        "--out",
        str(out),
        "--no-progress",
        "--threads",
        str(threads),
        f"train.seed={run.seed}",
        f"train.max_steps={run.steps}",
        f"train.eval_every={eval_every if eval_every else 'null'}",
        "train.eval_tokens=0",
        "train.checkpoint_every=null",
        "train.keep_last=1",
        "train.sample_prompts=[]",
        *run.overrides,
    ]


def evaluations(folder: Path) -> dict[int, float]:
    """Validation bits per byte by tokens seen, from a finished run's ``metrics.jsonl``."""
    out = {}
    for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if "val_bpb" in row:
            out[row["tokens"]] = row["val_bpb"]
    return out


def finished(folder: Path) -> bool:
    return (folder / "final" / "model.safetensors").is_file()


def train(run: Run, data: Path, root: Path, eval_every: int | None = None, threads: int = 1) -> dict[int, float]:
    """Train ``run`` into ``root`` (unless it finished there before); its evaluations."""
    folder = run.folder(root)
    if not finished(folder):
        log = root / f"{folder.name}.log"
        started = time.perf_counter()
        with open(log, "w", encoding="utf-8") as f:
            args = train_args(run, data.resolve(), folder.resolve(), eval_every, threads)
            done = subprocess.run([*args, "--overwrite"], stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=_env())
        if done.returncode:
            raise RuntimeError(f"{folder.name} failed (exit {done.returncode}); see {log}")
        print(f"  {folder.name}: {time.perf_counter() - started:.0f} s", flush=True)
    return evaluations(folder)


def train_all(runs: list[Run], data: Path, root: Path, jobs: int, eval_every: int | None = None) -> list[dict]:
    """Train ``runs``, ``jobs`` at a time (one thread each); their evaluations in order."""
    root.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda r: train(r, data, root, eval_every), runs))


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("ALILAMA_THREADS", None)
    return env


def test_bpb(folder: Path, text: Path) -> float:
    """Bits per byte of a run's final model on all of ``text`` at the trained context (``alilama eval``)."""
    result = subprocess.run(
        [
            *ALILAMA,
            "eval",
            str(folder.resolve()),
            "--data",
            str(text.resolve()),
            "--max-tokens",
            "0",
            "--context-lengths",
            "128",
            "--threads",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        check=True,
    )
    rows = json.loads(result.stdout)
    return float(rows[0]["bpb"])
