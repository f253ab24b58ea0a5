"""The model settings ``activation``, ``qk_norm`` and ``tie_embeddings`` in every export, from the reader's side.

Each folder or file is read where Alilama cannot be imported: transformers 5
(this Python) and 4.57 (``build/envs/readers``) through ``probe_folder.py``,
llama.cpp through ``probe_gguf.py``; logits and greedy ids against Alilama's.
An untied head that an export dropped or tied back would change the logits,
so the same comparisons catch it. Settings an architecture lacks are refused
by name (``native_reason``, ``gguf_reason``), and ``export hf`` falls back to
remote code for them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from alilama_testing import ok, run_cli
from hf.conftest import NATIVE_SHAPES, SHAPES
from hf.test_gguf import F32_TOLERANCE, expected_files, in_llama_cpp
from hf.test_reader_versions import TOLERANCE, read_with, readers_python

from alilama_core.runs.checkpoint import load_run
from alilama_exporters.hf_folder import exported_format

NOBIAS = {k: v for k, v in NATIVE_SHAPES["alibi-nobias"].items() if k != "positional"}
UNTIED = dict(tie_embeddings=False)
RELU2 = dict(activation="relu2")
QK = dict(qk_norm=True)
# name -> (positional, shape and settings)
RUNS = {
    "rope-qk-relu2-untied": ("rope", {**SHAPES["rope"], **QK, **RELU2, **UNTIED}),
    "alibi-qk": ("alibi", {**SHAPES["alibi"], **QK}),
    "alibi-nobias-relu2": ("alibi", {**NOBIAS, **RELU2}),
    "learned-relu2": ("learned", {**SHAPES["learned"], **RELU2}),
    "rope-relu2": ("rope", {**SHAPES["rope"], **RELU2}),
    "alibi-nobias-untied": ("alibi", {**NOBIAS, **UNTIED}),
    "learned-untied": ("learned", {**SHAPES["learned"], **UNTIED}),
    "rope-untied": ("rope", {**SHAPES["rope"], **UNTIED}),
}
# What `export hf` (format auto) writes for each, and the class transformers builds from it.
CLASSES = {
    "rope-qk-relu2-untied": "AlilamaForCausalLM",
    "alibi-qk": "AlilamaForCausalLM",
    "alibi-nobias-relu2": "AlilamaForCausalLM",
    "learned-relu2": "GPT2LMHeadModel",
    "rope-relu2": "GPTNeoXForCausalLM",
    "alibi-nobias-untied": "MptForCausalLM",
    "learned-untied": "GPT2LMHeadModel",
    "rope-untied": "GPTNeoXForCausalLM",
}
READ = ["rope-qk-relu2-untied", "learned-relu2", "rope-relu2", "alibi-nobias-untied", "learned-untied", "rope-untied"]
"""The folders read under both transformers versions (the other two: the fallback to remote code, below)."""
HEAD = {"alibi-nobias-untied": "lm_head.weight", "learned-untied": "lm_head.weight", "rope-untied": "embed_out.weight"}
"""The untied head's name in each native folder's model.safetensors (``native.HEADS``)."""


@pytest.fixture(scope="module")
def option_runs(tmp_path_factory, tokenizer, make_run) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("option-runs")
    return {
        name: make_run(root, positional, tokenizer, metrics=False, name=name, **shape)
        for name, (positional, shape) in RUNS.items()
    }


@pytest.fixture(scope="module")
def option_exports(tmp_path_factory, option_runs) -> dict[str, Path]:
    """``export`` with the default format (auto) of every run."""
    from alilama_exporters.hf_folder import export

    root = tmp_path_factory.mktemp("option-exports")
    return {name: export(run, root / name, repo_id=f"alilama-test/{name}") for name, run in option_runs.items()}


@pytest.fixture(scope="module")
def option_expected(tmp_path_factory, option_runs) -> dict[str, Path]:
    return expected_files(option_runs, tmp_path_factory.mktemp("option-expected"))


def _tensor_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


# -- transformers: remote code and the native architectures --------------------------------------------------


@pytest.mark.parametrize("reader", ["transformers-4", "transformers-5"])
@pytest.mark.parametrize("name", READ)
def test_each_setting_reads_back_exactly_under_old_and_new_transformers(reader, name, option_exports, option_expected):
    python = readers_python() if reader == "transformers-4" else Path(sys.executable)
    result = read_with(python, option_exports[name], option_expected[name])
    assert result["transformers"].startswith("4." if reader == "transformers-4" else "5.")
    assert result["architecture"] == CLASSES[name]
    assert result["max_logit_diff"] <= TOLERANCE, result
    assert result["greedy_equal"] and result["tokenizer_equal"] and len(result["greedy"]) > 0, result


def test_the_folders_say_each_setting(option_exports):
    every = json.loads((option_exports["rope-qk-relu2-untied"] / "config.json").read_text())
    assert every["model_type"] == "alilama" and every["tie_word_embeddings"] is False
    assert every["activation"] == "relu2" and every["qk_norm"] is True
    names = _tensor_names(option_exports["rope-qk-relu2-untied"])
    assert "lm_head.weight" in names and "model.layers.1.attn.q_norm.weight" in names
    assert "model.layers.0.attn.k_norm.weight" in names
    for name, head in HEAD.items():
        config = json.loads((option_exports[name] / "config.json").read_text())
        assert config["tie_word_embeddings"] is False and head in _tensor_names(option_exports[name]), name
    assert json.loads((option_exports["learned-relu2"] / "config.json").read_text())["activation_function"] == "relu2"
    neox = json.loads((option_exports["rope-relu2"] / "config.json").read_text())
    assert neox["hidden_act"] == "relu2" and neox["tie_word_embeddings"] is True
    assert "embed_out.weight" not in _tensor_names(option_exports["rope-relu2"])  # tied: not stored, as before
    card = (option_exports["rope-qk-relu2-untied"] / "README.md").read_text()
    assert "ReLU²" in card and "not tied" in card and "RMS-normalised per head" in card


@pytest.mark.parametrize("name", ["rope-qk-relu2-untied", "rope-untied"])
def test_a_folder_without_its_head_reads_as_another_model(name, option_exports, option_expected, tmp_path):
    """What the logit comparisons above rule out: the untied head dropped (or tied back) by the export."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / name
    shutil.copytree(option_exports[name], folder)
    state = load_file(str(folder / "model.safetensors"))
    del state[HEAD.get(name, "lm_head.weight")]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    result = read_with(Path(sys.executable), folder, option_expected[name])
    assert result["max_logit_diff"] > 1e-2, result


def test_an_old_remote_code_config_without_the_settings_loads_as_before(exports, runs, tmp_path):
    """A config.json written before the settings existed: GELU, no QK-norm, tied head, same logits."""
    import alilama_hf

    alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from transformers import AutoModelForCausalLM

    old = tmp_path / "old"
    shutil.copytree(exports["rope"], old)
    config = json.loads((old / "config.json").read_text())
    for key in ("activation", "qk_norm"):
        del config[key]
    (old / "config.json").write_text(json.dumps(config))
    hf = AutoModelForCausalLM.from_pretrained(old).eval()
    assert (hf.config.activation, hf.config.qk_norm, hf.config.tie_word_embeddings) == ("gelu", False, True)
    model = load_run(runs["rope"]).model
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (hf(ids).logits - model(ids)).abs().max() <= TOLERANCE


def test_the_remote_code_repeats_alilamas_activations():
    """configuration_alilama.py runs without Alilama, so it repeats the names; they must stay Alilama's."""
    from alilama_core.contracts.config import ACTIVATIONS
    from alilama_core.engine.model import ACTIVATION
    from alilama_hf import configuration_alilama, modeling_alilama

    assert configuration_alilama.ACTIVATIONS == ACTIVATIONS
    assert modeling_alilama.ACTIVATION.keys() == ACTIVATION.keys()
    x = torch.linspace(-4, 4, 101)
    for name in ACTIVATIONS:
        assert torch.equal(modeling_alilama.ACTIVATION[name](x), ACTIVATION[name](x)), name


def test_transformers_relu2_is_alilamas_in_both_versions(tmp_path):
    """GPT-2 and GPT-NeoX take ``relu2`` from ``ACT2FN``: bit-for-bit ``relu(x) ** 2`` in 4.57 and 5."""
    script = (
        "import torch, transformers; from transformers.activations import ACT2FN; "
        "x = torch.linspace(-6, 6, 2001); "
        "print(transformers.__version__, torch.equal(ACT2FN['relu2'](x), torch.relu(x).square()))"
    )
    import subprocess

    for python in (readers_python(), Path(sys.executable)):
        proc = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and proc.stdout.split()[-1] == "True", proc.stdout + proc.stderr


# -- the reasons, and the fallback to remote code ------------------------------------------------------------


def test_native_reason_names_what_the_architecture_lacks(option_runs):
    from alilama_exporters.native import native_reason

    def reason(name: str) -> str | None:
        return native_reason(load_run(option_runs[name]).config.model)

    assert "MptForCausalLM has no per-head query/key RMSNorm" in reason("alibi-qk")
    assert "GPTNeoXForCausalLM has no per-head query/key RMSNorm" in reason("rope-qk-relu2-untied")
    assert "MPT's MLP is exact GELU; this model's activation is 'relu2'" in reason("alibi-nobias-relu2")
    for name in ("learned-relu2", "rope-relu2", *HEAD):
        assert reason(name) is None, name


@pytest.mark.parametrize(
    "name,phrase",
    [("alibi-qk", "has no per-head query/key RMSNorm"), ("alibi-nobias-relu2", "MPT's MLP is exact GELU")],
)
def test_export_hf_falls_back_to_remote_code_and_reads_back(name, phrase, option_runs, option_expected, tmp_path):
    out = tmp_path / "out"
    result = run_cli("export", "hf", str(option_runs[name]), str(out))
    assert "as remote-code" in ok(result)
    assert "format remote-code: not a transformers architecture" in result.stderr and phrase in result.stderr
    assert exported_format(out) == "remote-code"
    read = read_with(Path(sys.executable), out, option_expected[name])
    assert read["architecture"] == "AlilamaForCausalLM" and read["max_logit_diff"] <= TOLERANCE, read
    assert read["greedy_equal"], read


def test_native_format_refuses_them_by_name(option_runs, tmp_path):
    result = run_cli("export", "hf", str(option_runs["alibi-qk"]), str(tmp_path / "out"), "--format", "native")
    assert result.returncode == 1 and "has no per-head query/key RMSNorm" in result.stderr
    assert "--format remote-code" in result.stderr and not (tmp_path / "out").exists()


# -- GGUF: llama.cpp ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,arch", [("alibi-nobias-untied", "mpt"), ("learned-untied", "gpt2"), ("rope-untied", "gptneox")]
)
def test_llama_cpp_reads_an_untied_head(name, arch, option_runs, option_expected, tmp_path):
    import gguf

    from alilama_exporters.gguf_file import export_gguf

    path = tmp_path / f"{name}.gguf"
    assert export_gguf(option_runs[name], path)["architecture"] == arch
    model = load_run(option_runs[name]).model
    reader = gguf.GGUFReader(path)
    output = next(t for t in reader.tensors if t.name == "output.weight")
    assert torch.equal(torch.from_numpy(output.data.copy()).reshape(model.head.weight.shape), model.head.weight)
    assert "output.bias" not in {t.name for t in reader.tensors}
    del reader
    result = in_llama_cpp(path, option_expected[name])
    assert result["max_logit_diff"] <= F32_TOLERANCE, result
    assert result["greedy_equal"] and result["tokenizer_equal"], result


@pytest.mark.parametrize(
    "name,phrase",
    [
        ("learned-relu2", "llama.cpp's gpt2 computes its MLP with GELU only"),
        ("rope-relu2", "llama.cpp's gptneox computes its MLP with GELU only"),
        ("alibi-qk", "llama.cpp's mpt has no per-head query/key RMSNorm"),
        ("rope-qk-relu2-untied", "llama.cpp's gptneox computes its MLP with GELU only"),
    ],
)
def test_gguf_refuses_what_llama_cpp_does_not_compute(name, phrase, option_runs, tmp_path):
    result = run_cli("export", "gguf", str(option_runs[name]), str(tmp_path / "m.gguf"))
    assert result.returncode != 0 and phrase in result.stderr and "Traceback" not in result.stderr
    assert "export hf --format remote-code keeps it" in result.stderr
    assert list(tmp_path.iterdir()) == []  # no file, no temporary left behind


# -- ONNX: through the native export (optimum-onnx and onnxruntime in the reader environment) ---------------


@pytest.mark.parametrize("name", ["learned-relu2", "rope-untied"])
def test_export_onnx_takes_the_settings_native_takes(name, option_runs, tmp_path):
    result = run_cli("export", "onnx", str(option_runs[name]), str(tmp_path / "o"), "--python", str(readers_python()))
    ok(result)
    line = next(x for x in result.stderr.splitlines() if "onnxruntime 1." in x)
    assert float(line.split("logits within ")[1].split(",")[0]) <= 1e-4 and "greedy ids equal" in line


def test_export_onnx_refuses_qk_norm_by_name(option_runs, tmp_path):
    result = run_cli("export", "onnx", str(option_runs["alibi-qk"]), str(tmp_path / "o"))
    assert result.returncode == 1 and "has no per-head query/key RMSNorm" in result.stderr
    assert list(tmp_path.iterdir()) == []
