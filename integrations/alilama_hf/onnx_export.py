"""``alilama export onnx RUN OUT [--python PYTHON]``: a run as ONNX for onnxruntime and transformers.js.

The road goes through the native Hugging Face export (MPT, GPT-2 or GPT-NeoX;
``alilama_hf.native``) and optimum's ONNX exporter, which knows those three
architectures. optimum-onnx admits transformers below 4.58 only, so it usually
lives in an environment of its own: ``--python`` names that environment's
interpreter (default: this one), where ``onnx_folder.py`` exports the folder and
runs it in onnxruntime against Alilama's logits and greedy ids before ``OUT``
is swapped in. The folder is laid out as transformers.js reads it (and optimum's
``ORTModelForCausalLM``, which searches subfolders): ``OUT/onnx/model.onnx`` with
config.json, generation_config.json and the tokenizer files at the top. A model
without a native architecture (NoPE, ALiBi with biases, plugin schemes) is refused:
optimum has no ONNX configuration for remote code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alilama_core.contracts.errors import AlilamaError, UnsupportedError

ONNX_TOLERANCE = 1e-4
"""Largest logit difference accepted between onnxruntime and Alilama (seen: ~6e-6)."""
SCRIPT = Path(__file__).resolve().parent / "onnx_folder.py"
EXPORT_STEPS = 3
"""``export_onnx``'s ``on_step`` calls: the native export, the ONNX export checked, the folder swapped in."""
ENVIRONMENT_RECIPE = (
    "python -m venv ~/venvs/onnx && ~/venvs/onnx/bin/pip install torch 'optimum-onnx[onnxruntime]' "
    "then pass --python ~/venvs/onnx/bin/python"
)


def export_onnx(
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    python: str | None = None,
    checkpoint: str | None = None,
    overwrite: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write the ONNX folder ``out`` for ``run`` (built beside it, swapped in when checked); what it holds."""
    from alilama_core.contracts.files import disk_full_guard, exclusive_lock
    from alilama_core.runs.outputs import building, check_export, follow_umask
    from alilama_hf.export import export, load_for_export, write_expected
    from alilama_hf.native import native_reason

    step = on_step or (lambda text: None)
    python = python or sys.executable
    out = Path(out)
    check_export(out, "onnx", run, overwrite)
    loaded = load_for_export(run, checkpoint)
    reason = native_reason(loaded.config.model)
    if reason is not None:
        raise UnsupportedError(
            f"cannot export as ONNX: optimum exports transformers' own architectures, and this model has none: {reason}"
        )
    with tempfile.TemporaryDirectory(prefix="alilama-onnx-") as tmp:
        folder = export(run, Path(tmp) / "hf", checkpoint=checkpoint, format="native")
        expected = Path(tmp) / "expected.safetensors"
        write_expected(loaded, expected)
        step(f"exported {run} as transformers' {json.loads((folder / 'config.json').read_text())['model_type']}")
        with exclusive_lock(out, "ONNX export"):
            check_export(out, "onnx", run, overwrite)  # again, under the lock
            with building(out, "onnx", "ONNX export") as work, disk_full_guard(out, "ONNX export"):
                result = _run(python, folder, work, expected)
                wrong = []
                if not result["max_logit_diff"] <= ONNX_TOLERANCE:
                    wrong.append(f"logits differ by {result['max_logit_diff']:.2e} (more than {ONNX_TOLERANCE:g})")
                if not result["greedy_equal"]:
                    wrong.append("greedy ids differ")
                if wrong:
                    raise AlilamaError(f"onnxruntime does not compute the run's model: {'; '.join(wrong)}")
                follow_umask(work)
                step(
                    f"optimum-onnx {result['optimum_onnx']} exported it; onnxruntime {result['onnxruntime']}: "
                    f"logits within {result['max_logit_diff']:.1e}, greedy ids equal"
                )
    step(f"wrote {out}")
    return result


def _run(python: str, folder: Path, work: Path, expected: Path) -> dict:
    """``onnx_folder.py`` under ``python``: its result, or an error that says how to get such an environment."""
    from alilama_hf.export import run_standalone

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    try:
        probe = subprocess.run(
            [python, "-c", "import optimum.exporters.onnx, onnxruntime"],
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        if probe.returncode != 0:
            raise AlilamaError(
                f"export onnx needs optimum-onnx and onnxruntime in {python} "
                f"({(probe.stderr.strip().splitlines() or ['not importable'])[-1]}); optimum-onnx admits "
                f"transformers < 4.58 only, so give it an environment of its own: {ENVIRONMENT_RECIPE}"
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AlilamaError(f"--python {python}: could not run it ({exc})") from None
    return run_standalone(
        python,
        [str(SCRIPT), str(folder), str(work), str(expected)],
        where=f"--python {python}",
        failed="optimum's ONNX export failed",
        timeout=1800,
    )
