"""``alilama export onnx RUN OUT [--python PYTHON]``: a run as ONNX for onnxruntime and transformers.js.

The road goes through the native Hugging Face export (MPT, GPT-2 or GPT-NeoX;
``alilama_exporters.native``) and optimum's ONNX exporter, which knows those three
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

from alilama_core.base.errors import AlilamaError
from alilama_core.contracts.exporter import Exporter, ExportOption, Reading, Staging, run_probe

ONNX_TOLERANCE = 1e-4
"""Largest logit difference accepted between onnxruntime and Alilama (seen: ~6e-6)."""
SCRIPT = Path(__file__).resolve().parent / "onnx_folder.py"
ENVIRONMENT_RECIPE = (
    "python -m venv ~/venvs/onnx && ~/venvs/onnx/bin/pip install torch 'optimum-onnx[onnxruntime]' "
    "then pass --python ~/venvs/onnx/bin/python"
)


class ONNXExporter(Exporter):
    """An ONNX folder for onnxruntime and transformers.js, through optimum (in ``--python``)."""

    name = "onnx"
    description = "an ONNX folder for onnxruntime and transformers.js (through optimum)"
    target = "folder"
    noun = "ONNX export"
    contents = ("onnx", "*.json", "*.onnx", "*.onnx_data", "*.txt", "chat_template.jinja")
    options = (
        ExportOption(
            "python",
            "--python",
            None,
            "A Python with optimum-onnx and onnxruntime (they need transformers < 4.58); default: this one.",
        ),
    )
    examples = (
        "alilama export onnx runs/essay-nobias out/onnx --python ~/onnx/bin/python",
        "alilama export onnx runs/rope out/rope-onnx --overwrite",
    )
    steps = 2
    reader = "onnxruntime"
    reads_here = True  # the reading is the one ``--python`` made while exporting (optimum exports and runs it)

    def problem(self, model_config) -> str | None:
        from alilama_exporters.native import native_reason

        reason = native_reason(model_config)
        if reason is None:
            return None
        return f"optimum exports transformers' own architectures, and this model has none: {reason}"

    def write(self, loaded, staging: Staging, on_step) -> dict[str, Any]:
        from alilama_exporters.hf_folder import _write_folder

        python = self.options["python"] or sys.executable
        with tempfile.TemporaryDirectory(prefix="alilama-onnx-") as tmp:
            folder = Path(tmp) / "hf"
            folder.mkdir()
            _write_folder(loaded, folder, staging.run, _HF_OPTIONS, lambda text: None)
            model_type = json.loads((folder / "config.json").read_text())["model_type"]
            on_step(f"exported {staging.run} as transformers' {model_type}")
            self._result = _run(python, folder, staging.path, staging.expected)
        on_step(f"optimum-onnx {self._result['optimum_onnx']} exported it in {python}")
        return dict(self._result)

    def read_back(self, path: Path, expected: Path, python: str | None = None) -> Reading | None:
        result = self._result
        return Reading(
            reader=f"onnxruntime {result['onnxruntime']}",
            max_logit_diff=float(result["max_logit_diff"]),
            greedy_equal=result.get("greedy_equal"),
            where=self.options["python"] or "this Python",
            raw=dict(result),
        )

    def tolerance(self) -> float:
        return ONNX_TOLERANCE

    def mismatch(self, reading: Reading, wrong: list[str]) -> str:
        return f"onnxruntime does not compute the run's model: {'; '.join(wrong)}"

    def checked_line(self, readings: list[Reading]) -> str:
        return "ran it in " + "; ".join(r.line() for r in readings)

    def summary(self, run: str, out: Path, info) -> list[str]:
        return [f"exported {run} to {out} for onnxruntime: {', '.join(info['files'])}"]


_HF_OPTIONS = {"format": "native", "repo_id": None, "license": None, "datasets": []}


def export_onnx(
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    python: str | None = None,
    checkpoint: str | None = None,
    overwrite: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """``alilama export onnx`` from Python: write the ONNX folder ``out`` for ``run``; what it holds."""
    from alilama_core.runs.exports import export

    return export("onnx", run, out, checkpoint=checkpoint, overwrite=overwrite, on_step=on_step, python=python).info


def _run(python: str, folder: Path, work: Path, expected: Path) -> dict:
    """``onnx_folder.py`` under ``python``: its result, or an error that says how to get such an environment."""
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
    return run_probe(
        python,
        [str(SCRIPT), str(folder), str(work), str(expected)],
        where=f"--python {python}",
        failed="optimum's ONNX export failed",
        timeout=1800,
    )
