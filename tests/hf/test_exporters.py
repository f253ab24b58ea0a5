"""Exporters are a plugin kind: the registry lists them, the kit checks them, and a scheme declares its targets.

``alilama-alibi-twin`` (tests/plugins) is ALiBi's maths under another name, as a
third party would ship it: ``alibi-twin`` declares ``{"gguf": "mpt", "hf": "mpt"}``
and is exported, and read back, exactly as the built-in ``alibi``;
``alibi-undeclared`` declares nothing and every architecture export refuses it by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from alilama_testing import needs_test_plugins, ok, run_cli

from alilama_core.base.errors import AlilamaError
from alilama_core.contracts.exporter import Exporter, ExportOption, Reading
from alilama_core.kit import check_exporter

ROOT = Path(__file__).resolve().parents[2]
READERS = ROOT / "build" / "envs" / "readers" / "bin" / "python"
NO_ALILAMA = (
    "import sys\n"
    "class NoAlilama:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0].startswith('alilama'):\n"
    "            raise ImportError(f'{name} is blocked')\n"
    "sys.meta_path.insert(0, NoAlilama())\n"
)
NATIVE_MPT = ["model.bias=false", "model.norm_bias=false", "model.d_mlp=128", "model.context_length=32"]
"""What MPT computes: no linear or norm biases, an MLP 4 x d_model wide (the tiny preset's d_model is 32)."""


def readers(module: str) -> str:
    """The reader environment's Python where ``module`` imports; skip otherwise."""
    if not READERS.exists() or subprocess.run([str(READERS), "-c", f"import {module}"]).returncode != 0:
        pytest.skip(f"{module} is not installed in {READERS} (make readers / make llama-cpp)")
    return str(READERS)


# -- the registry, the commands, no import hook ------------------------------------------------------


def test_the_old_module_paths_are_gone_and_no_import_hook_is_left():
    gone = subprocess.run([sys.executable, "-c", "import alilama_core.config"], capture_output=True, text=True)
    assert gone.returncode != 0 and "ModuleNotFoundError" in gone.stderr
    code = (
        "import sys\n"
        "from alilama_core.engine.registry import get_registry\n"
        "reg = get_registry(); reg.tables()\n"
        "assert sorted(reg.names('exporter')) == ['gguf', 'hf', 'onnx'], reg.names('exporter')\n"
        "import alilama_hf, alilama_exporters\n"
        "ours = [f for f in sys.meta_path if type(f).__module__.split('.')[0].startswith('alilama')]\n"
        "assert not ours, ours\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_plugins_lists_the_exporters_and_export_help_lists_the_formats():
    rows = json.loads(ok(run_cli("plugins", "--json")))["registered"]
    exporters = {r["name"]: r for r in rows if r["kind"] == "exporter"}
    assert set(exporters) == {"hf", "gguf", "onnx"} and exporters["gguf"]["plugin"] == "exporters"
    text = ok(run_cli("export", "--help"))
    assert all(name in text for name in ("hf", "gguf", "onnx"))
    assert "--dtype" in ok(run_cli("export", "gguf", "--help"))


def test_an_option_the_format_does_not_take_is_refused_by_name(runs, tmp_path):
    result = run_cli("export", "hf", str(runs["rope"]), str(tmp_path / "o"), "--dtype", "f16")
    message = " ".join(result.stderr.split())
    assert result.returncode == 2 and "export hf does not take --dtype" in message and "--format" in message
    result = run_cli("export", "onnx", str(runs["rope"]), str(tmp_path / "o"), "--check-with", sys.executable)
    assert result.returncode == 2 and "export onnx does not take --check-with" in " ".join(result.stderr.split())
    assert not (tmp_path / "o").exists()


# -- the kit ----------------------------------------------------------------------------------------------


@pytest.mark.slow  # the exporter kit on every exporter
def test_the_built_in_exporters_pass_the_kit():
    names = ["declaration", "unknown option refused", "problem() answers", "export reads back"]
    pushes = [*names, "push refuses a bad destination"]  # hf uploads to the Hub
    assert check_exporter("hf") == pushes
    assert check_exporter("hf", options={"format": "remote-code"}) == pushes
    assert check_exporter("hf", options={"format": "native"}, model={"positional": "rope"}) == pushes
    assert check_exporter("gguf", options={"dtype": "f16", "modelfile": True}) == names


def test_gguf_passes_the_kit_read_by_llama_cpp():
    python = readers("llama_cpp")
    assert check_exporter("gguf", check_with=[python])[-1] == "export reads back"


def test_onnx_passes_the_kit_read_by_onnxruntime():
    python = readers("optimum.exporters.onnx")
    native = {"positional": "rope"}
    assert check_exporter("onnx", options={"python": python}, model=native)[-1] == "export reads back"


class Wrong(Exporter):
    """Writes a file whose reader disagrees with the run."""

    name = "wrong-reader"
    target = "file"
    magic = b"WRONG"
    options = (ExportOption("shift", "--shift", "1.0", "how far the reader is off"),)
    reads_here = True

    def problem(self, model_config):
        return None

    def write(self, loaded, staging, on_step):
        staging.path.write_bytes(b"WRONG")
        on_step("wrote it")
        return {}

    def read_back(self, path, expected, python=None):
        return Reading(reader="a wrong reader", max_logit_diff=float(self.options["shift"]), greedy_equal=True)


def test_an_exporter_whose_reading_disagrees_fails_the_kit_and_leaves_nothing():
    with pytest.raises(AssertionError, match=r"logits differ by 1\.00e\+00"):
        check_exporter(Wrong)
    assert check_exporter(Wrong, options={"shift": "0"})[-1] == "export reads back"


class Uploads(Wrong):
    """Declares an upload; its ``push`` exports first (``exports_first``), or takes any repository."""

    name = "uploads-anywhere"
    uploads_to = "a shelf"
    exports_first = False

    def push(self, run, repo, *, private=False, revision=None, checkpoint=None, on_step=None):
        if self.exports_first:
            on_step("exported")
        if not repo and self.exports_first:
            raise AlilamaError("no repository")
        return f"shelf/{repo}"


class ExportsFirst(Uploads):
    name = "uploads-late"
    exports_first = True


@pytest.mark.parametrize(
    "exporter, message",
    [(Uploads, "accepted an empty repository name"), (ExportsFirst, "exported before it refused")],
)
def test_a_push_that_checks_its_destination_late_fails_the_kit(exporter, message, tmp_path):
    from alilama_core.kit import exporter_checks

    (push,) = [c for c in exporter_checks(exporter, run=tmp_path / "run") if c.name.startswith("push")]
    with pytest.raises(AssertionError, match=message):
        push()
    (skipped,) = [c for c in exporter_checks(Wrong) if c.name.startswith("push")]
    assert skipped.skip == "no uploads_to"


class Undeclared(Wrong):
    name = "bad-options"
    options = (ExportOption("checkpoint", "checkpoint", None),)


def test_a_malformed_declaration_fails_the_kit():
    with pytest.raises(AssertionError, match="needs a Python name and a --flag"):
        check_exporter(Undeclared)


# -- a third party's scheme, exported as the built-in one --------------------------------------------------


@pytest.fixture(scope="module")
def twin_runs(tmp_path_factory) -> dict[str, Path]:
    """Tiny runs trained through the CLI with ``alibi-twin``, ``alibi`` and ``alibi-undeclared``."""
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("twin")
    write_corpus(root / "train.txt", 200, seed=1)
    tok, data = root / "tok", root / "data"
    ok(run_cli("tokenizer", "train", "-i", str(root / "train.txt"), "-v", "320", "-o", str(tok)))
    ok(run_cli("data", "prepare", "-i", str(root / "train.txt"), "--tokenizer", str(tok), "-o", str(data)))
    runs = {}
    for scheme in ("alibi-twin", "alibi", "alibi-undeclared"):
        runs[scheme] = root / scheme
        args = ["--data", str(data), "--out", str(runs[scheme]), "--no-progress", f"model.positional={scheme}"]
        steps = ["train.max_steps=6", "train.eval_every=6", "train.checkpoint_every=6", "train.batch_size=4"]
        ok(run_cli("train", "--preset", "tiny", *args, *NATIVE_MPT, *steps))
    return runs


pytestmark_twin = needs_test_plugins("alilama-alibi-twin")


@pytestmark_twin
def test_the_twin_is_written_as_mpt_and_read_by_llama_cpp_as_alibi_is(twin_runs, tmp_path):
    python = readers("llama_cpp")
    figures = {}
    for scheme in ("alibi-twin", "alibi"):
        out = tmp_path / f"{scheme}.gguf"
        result = run_cli("export", "gguf", str(twin_runs[scheme]), str(out), "--check-with", python)
        assert "(mpt, f32) for llama.cpp" in ok(result)
        line = next(x for x in result.stderr.splitlines() if "ran it in llama.cpp" in x)
        figures[scheme] = float(line.split("logits within ")[1].split(",")[0])
    assert figures["alibi-twin"] <= 5e-3 and figures["alibi"] <= 5e-3  # gguf's tolerance at f32, for both


@pytestmark_twin
def test_the_twin_is_written_as_transformers_mpt_read_without_alilama(twin_runs, tmp_path):
    python = readers("transformers")
    for scheme in ("alibi-twin", "alibi"):
        out = tmp_path / scheme
        result = run_cli("export", "hf", str(twin_runs[scheme]), str(out), "--format", "native", "--check-with", python)
        assert "as native (mpt)" in ok(result)
        assert not list(out.glob("*.py"))  # no code: transformers' own MPT
        step = next(x for x in result.stderr.splitlines() if "read the folder back" in x)
        assert f"({python})" in step and step.count("logits within") == 2
    # the folder loads in the reader environment with no Alilama importable, as transformers' MPT
    code = NO_ALILAMA + (
        "from transformers import AutoModelForCausalLM\n"
        f"print(type(AutoModelForCausalLM.from_pretrained({str(tmp_path / 'alibi-twin')!r})).__name__)\n"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "MptForCausalLM", proc.stderr[-2000:]


@pytestmark_twin
def test_a_scheme_that_declares_nothing_is_refused_by_name(twin_runs, tmp_path):
    run = str(twin_runs["alibi-undeclared"])
    gguf = run_cli("export", "gguf", run, str(tmp_path / "u.gguf"))
    message = " ".join(gguf.stderr.split())
    assert gguf.returncode == 1 and "positional scheme 'alibi-undeclared'" in message
    assert "declares no 'gguf' in its export_targets" in message and "alibi-twin (mpt)" in message
    native = run_cli("export", "hf", run, str(tmp_path / "u"), "--format", "native")
    message = " ".join(native.stderr.split())
    assert native.returncode == 1 and "declares no 'hf' in its export_targets" in message
    assert "--format remote-code" in message
    assert not (tmp_path / "u.gguf").exists() and not (tmp_path / "u").exists()
    # the remote-code export still holds it: its own standalone module, beside Alilama's code
    assert "as remote-code" in ok(run_cli("export", "hf", run, str(tmp_path / "r")))
