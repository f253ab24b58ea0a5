"""The model settings ``activation``, ``qk_norm`` and ``tie_embeddings`` in every export, from the reader's side.

Each folder or file is read where Alilama cannot be imported: transformers 5
(this Python) and 4.57 (``build/envs/readers``) through ``probe_folder.py``,
llama.cpp through ``probe_gguf.py``; logits and greedy ids against Alilama's.
An untied head that an export dropped or tied back would change the logits,
so the same comparisons catch it. Settings an architecture lacks are refused
by name (``native_reason``, ``gguf_reason``), and ``export hf`` falls back to
remote code for them.

Each reader Python runs once for the whole module (``read_by_transformers_4``,
``read_by_transformers_5``): one process per transformers version reads every
folder, and each test asserts on its own entry. The ``alilama`` commands run
once too (``commands``), each a process of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from alilama_testing import NO_ALILAMA, ok, run_cli
from hf.conftest import NATIVE_SHAPES, SHAPES
from hf.test_gguf import F32_TOLERANCE, expected_files, in_llama_cpp
from hf.test_reader_versions import READERS, TOLERANCE, readers_python

from alilama_core.runs.checkpoint import load_run
from alilama_exporters.hf_folder import PROBE_FILE, exported_format

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
HEADLESS = ["rope-qk-relu2-untied", "rope-untied"]
"""Folders read again by transformers 5 with their untied head taken out."""
FALLBACK = [("alibi-qk", "has no per-head query/key RMSNorm"), ("alibi-nobias-relu2", "MPT's MLP is exact GELU")]
"""The runs no transformers architecture computes, and why: ``alilama export hf`` writes them as remote code."""
GGUF_REFUSED = [
    ("learned-relu2", "llama.cpp's gpt2 computes its MLP with GELU only"),
    ("rope-relu2", "llama.cpp's gptneox computes its MLP with GELU only"),
    ("alibi-qk", "llama.cpp's mpt has no per-head query/key RMSNorm"),
    ("rope-qk-relu2-untied", "llama.cpp's gptneox computes its MLP with GELU only"),
]
ONNX_NATIVE = ["learned-relu2", "rope-untied"]
"""Runs with settings a native export takes, exported to ONNX in the transformers 4.x reader environment."""

# A reader's one process: no alilama* module can be imported; transformers' relu2 against relu(x)**2, then
# probe_folder.probe on each folder of the job, the failure of one kept as its entry; one JSON line.
READ_ALL = NO_ALILAMA + textwrap.dedent(
    """
    import importlib.util, json, traceback
    import torch, transformers
    from transformers.activations import ACT2FN

    x = torch.linspace(-6, 6, 2001)
    equal = torch.equal(ACT2FN["relu2"](x), torch.relu(x).square())
    read = {"relu2": {"transformers": transformers.__version__, "equal": equal}}
    spec = importlib.util.spec_from_file_location("probe_folder", sys.argv[1])
    probe_folder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe_folder)
    with open(sys.argv[2], encoding="utf-8") as f:
        job = json.load(f)
    for key, (folder, expected) in job.items():
        try:
            read[key] = probe_folder.probe(folder, expected)
        except Exception:
            read[key] = {"error": traceback.format_exc()}
    print(json.dumps(read))
    """
)


@pytest.fixture(scope="module")
def option_runs(tmp_path_factory, tokenizer, make_run) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("option-runs")
    return {
        name: make_run(root, positional, tokenizer, metrics=False, name=name, **shape)
        for name, (positional, shape) in RUNS.items()
    }


@pytest.fixture(scope="module")
def option_exports(tmp_path_factory, option_runs) -> dict[str, Path]:
    """``export`` with the default format (auto) of each run in ``READ`` (``commands`` exports the other two)."""
    from alilama_exporters.hf_folder import export

    root = tmp_path_factory.mktemp("option-exports")
    return {name: export(option_runs[name], root / name, repo_id=f"alilama-test/{name}") for name in READ}


@pytest.fixture(scope="module")
def option_expected(tmp_path_factory, option_runs) -> dict[str, Path]:
    return expected_files(option_runs, tmp_path_factory.mktemp("option-expected"))


@pytest.fixture(scope="module")
def headless(tmp_path_factory, option_exports) -> dict[str, Path]:
    """Copies of the ``HEADLESS`` folders without their untied head in model.safetensors."""
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("option-headless")
    out = {}
    for name in HEADLESS:
        out[name] = folder = root / f"{name}-headless"  # a name of its own: its remote code is a module of its own
        shutil.copytree(option_exports[name], folder)
        state = load_file(str(folder / "model.safetensors"))
        del state[HEAD.get(name, "lm_head.weight")]
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def commands(tmp_path_factory, option_runs) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Each ``alilama`` command of the tests below, by key: its result, and the empty folder it was given.

    Each a process of its own (``run_cli``): the refusals, ``export hf`` of the ``FALLBACK`` runs
    (those folders are the ones read back) and, where the reader environment is, ``export onnx``.
    """
    root = tmp_path_factory.mktemp("option-commands")
    run = {name: str(path) for name, path in option_runs.items()}
    todo: dict[str, list[str]] = {"native-alibi-qk": ["export", "hf", run["alibi-qk"], "out", "--format", "native"]}
    todo.update({f"gguf-{name}": ["export", "gguf", run[name], "m.gguf"] for name, _ in GGUF_REFUSED})
    todo["onnx-refused-alibi-qk"] = ["export", "onnx", run["alibi-qk"], "o"]
    todo.update({f"hf-{name}": ["export", "hf", run[name], name] for name, _ in FALLBACK})
    if READERS.exists():  # the tests that need it skip (or fail, ALILAMA_REQUIRE_READERS=1) without it
        todo.update(
            {f"onnx-{name}": ["export", "onnx", run[name], "o", "--python", str(READERS)] for name in ONNX_NATIVE}
        )
    folders = {key: root / key for key in todo}
    for key, args in todo.items():
        folders[key].mkdir()
        args[3] = str(folders[key] / args[3])  # the output, in the command's own folder
    return {key: (run_cli(*args, timeout=3600), folders[key]) for key, args in todo.items()}


def _read_all(python: Path, folders: dict[str, tuple[Path, Path]], root: Path) -> dict:
    """``READ_ALL`` under ``python``: what it made of each ``(folder, expected)``, by key, and ``relu2``."""
    job = root / "folders.json"
    job.write_text(json.dumps({key: [str(f), str(e)] for key, (f, e) in folders.items()}), encoding="utf-8")
    proc = subprocess.run(
        [str(python), "-c", READ_ALL, str(PROBE_FILE), str(job)],
        capture_output=True,
        text=True,
        timeout=3600,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def read_by_transformers_4(tmp_path_factory, option_exports, option_expected) -> dict:
    folders = {name: (option_exports[name], option_expected[name]) for name in READ}
    return _read_all(readers_python(), folders, tmp_path_factory.mktemp("read-by-transformers-4"))


@pytest.fixture(scope="module")
def read_by_transformers_5(tmp_path_factory, option_exports, option_expected, headless, commands) -> dict:
    folders = {name: (option_exports[name], option_expected[name]) for name in READ}
    folders.update({f"headless-{name}": (folder, option_expected[name]) for name, folder in headless.items()})
    folders.update({f"hf-{name}": (commands[f"hf-{name}"][1] / name, option_expected[name]) for name, _ in FALLBACK})
    return _read_all(Path(sys.executable), folders, tmp_path_factory.mktemp("read-by-transformers-5"))


def read_back(request, reader: str, key: str) -> dict:
    """``reader``'s entry ``key`` from the module's one process of that reader (``read_by_transformers_*``).

    A missing transformers 4.x environment skips the test here, or fails it under ALILAMA_REQUIRE_READERS=1.
    """
    if reader == "transformers-4":
        readers_python()
    result = request.getfixturevalue("read_by_" + reader.replace("-", "_"))[key]
    assert "error" not in result, result["error"]
    return result


def _tensor_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


# -- transformers: remote code and the native architectures --------------------------------------------------


@pytest.mark.parametrize("reader", ["transformers-4", "transformers-5"])
@pytest.mark.parametrize("name", READ)
def test_each_setting_reads_back_exactly_under_old_and_new_transformers(reader, name, request):
    result = read_back(request, reader, name)
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


@pytest.mark.parametrize("name", HEADLESS)
def test_a_folder_without_its_head_reads_as_another_model(name, headless, request):
    """What the logit comparisons above rule out: the untied head dropped (or tied back) by the export."""
    assert HEAD.get(name, "lm_head.weight") not in _tensor_names(headless[name])
    result = read_back(request, "transformers-5", f"headless-{name}")
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


def test_transformers_relu2_is_alilamas_in_both_versions(request):
    """GPT-2 and GPT-NeoX take ``relu2`` from ``ACT2FN``: bit-for-bit ``relu(x) ** 2`` in 4.57 and 5."""
    for reader in ("transformers-4", "transformers-5"):
        relu2 = read_back(request, reader, "relu2")  # checked first in the reader's process, before any folder
        assert relu2["equal"] is True and relu2["transformers"].startswith(reader[-1] + "."), relu2


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


@pytest.mark.parametrize("name,phrase", FALLBACK)
def test_export_hf_falls_back_to_remote_code_and_reads_back(name, phrase, commands, request):
    result, folder = commands[f"hf-{name}"]
    assert "as remote-code" in ok(result)
    assert "format remote-code: not a transformers architecture" in result.stderr and phrase in result.stderr
    assert exported_format(folder / name) == "remote-code"
    read = read_back(request, "transformers-5", f"hf-{name}")
    assert read["architecture"] == "AlilamaForCausalLM" and read["max_logit_diff"] <= TOLERANCE, read
    assert read["greedy_equal"], read


def test_native_format_refuses_them_by_name(commands):
    result, folder = commands["native-alibi-qk"]
    assert result.returncode == 1 and "has no per-head query/key RMSNorm" in result.stderr
    assert "--format remote-code" in result.stderr and not (folder / "out").exists()


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


@pytest.mark.parametrize("name,phrase", GGUF_REFUSED)
def test_gguf_refuses_what_llama_cpp_does_not_compute(name, phrase, commands):
    result, folder = commands[f"gguf-{name}"]
    assert result.returncode != 0 and phrase in result.stderr and "Traceback" not in result.stderr
    assert "export hf --format remote-code keeps it" in result.stderr
    assert list(folder.iterdir()) == []  # no file, no temporary left behind


# -- ONNX: through the native export (optimum-onnx and onnxruntime in the reader environment) ---------------


@pytest.mark.parametrize("name", ONNX_NATIVE)
def test_export_onnx_takes_the_settings_native_takes(name, commands):
    python = readers_python()  # skipped where it is missing, failed instead under ALILAMA_REQUIRE_READERS=1
    result, _ = commands[f"onnx-{name}"]
    assert result.args[-1] == str(python)
    ok(result)
    line = next(x for x in result.stderr.splitlines() if "onnxruntime 1." in x)
    assert float(line.split("logits within ")[1].split(",")[0]) <= 1e-4 and "greedy ids equal" in line


def test_export_onnx_refuses_qk_norm_by_name(commands):
    result, folder = commands["onnx-refused-alibi-qk"]
    assert result.returncode == 1 and "has no per-head query/key RMSNorm" in result.stderr
    assert list(folder.iterdir()) == []
