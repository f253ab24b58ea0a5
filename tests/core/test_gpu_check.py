"""The prepared GPU check runs on CPU in its dry-run mode, so it cannot rot unseen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def test_gpu_check_dry_run_passes_on_cpu_and_skips_cuda_rows_with_a_reason():
    command = [sys.executable, str(SCRIPT), "--dry-run", "--budget", "900"]  # no row skips for time on a busy machine
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert rows and all(line.split()[0] in ("PASS", "FAIL", "SKIP") for line in rows)
    assert not any(line.startswith("FAIL") for line in rows)
    assert all("(" in line for line in rows if line.startswith("SKIP"))  # every skip says why
    names = " ".join(rows)
    for check in (
        "decode",
        "kv-chunk",
        "left-padded",
        "full",
        "D=8",
        "D=16",
        "flex compiles",
        "train tokens/s",
        "baseline-causal",
        "auto choices",
        "fwd+bwd",
    ):
        assert check in names, check
    assert sum(line.startswith("PASS  sdpa") for line in rows) == 8  # four shapes x two head sizes
    compiled = [line for line in rows if line.startswith("PASS  compiled decode")]  # its package built on CPU
    assert len(compiled) == 1 and "B=2 padded" in compiled[0] and "tokens as eager" in compiled[0], rows
