"""Every export, read by the oldest and the newest transformers the project admits, in processes without Alilama.

The reader environment for transformers 4.x (``build/envs/readers``: torch,
transformers 4.57, optimum-onnx, onnxruntime; no Alilama) is built by ``make
test``. The newest transformers is the one installed here, in a process whose
first statement makes every ``alilama*`` module unimportable. Both run the
export's own standalone check (``alilama_exporters/probe_folder.py``): logits on two
rows of random ids as long as the training context, greedy ids and text, and
the tokenizer's ids, against Alilama's. ``alilama export onnx`` runs in the
reader environment (optimum-onnx, onnxruntime), and its folder is read again by
transformers.js in Node (``make transformers-js``; skipped where it is missing).
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
from alilama_testing import NO_ALILAMA

from alilama_core.runs.exports import write_expected
from alilama_exporters.hf_folder import PROBE_FILE, check_folder

ROOT = Path(__file__).resolve().parents[2]
READERS = Path(os.environ.get("ALILAMA_READERS_PYTHON", ROOT / "build" / "envs" / "readers" / "bin" / "python"))
TOLERANCE = 1e-5
# What the reader's process runs: no alilama* module can be imported, then the probe file as __main__.
WITHOUT_ALILAMA = NO_ALILAMA + textwrap.dedent(
    """
    import runpy
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
)


def readers_python() -> Path:
    """The transformers 4.x reader environment; skipped when absent unless ALILAMA_REQUIRE_READERS=1 (CI)."""
    if not READERS.exists():
        if os.environ.get("ALILAMA_REQUIRE_READERS") == "1":
            pytest.fail(f"the reader environment {READERS} is missing: make test builds it (make readers)")
        pytest.skip(f"no transformers 4.x reader environment at {READERS} (make readers builds it)")
    return READERS


def read_with(python: Path, folder: Path, expected: Path) -> dict:
    proc = subprocess.run(
        [str(python), "-c", WITHOUT_ALILAMA, str(PROBE_FILE), str(folder), str(expected)],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def folders(native_exports, exports) -> dict[str, Path]:
    return {**native_exports, "remote-code-alibi": exports["alibi"]}


CASES = ["alibi-nobias", "learned", "rope", "remote-code-alibi"]
CLASSES = {
    "alibi-nobias": "MptForCausalLM",
    "learned": "GPT2LMHeadModel",
    "rope": "GPTNeoXForCausalLM",
    "remote-code-alibi": "AlilamaForCausalLM",
}


@pytest.fixture(scope="module")
def expected(tmp_path_factory, native_runs, runs) -> dict[str, Path]:
    from alilama_core.runs.checkpoint import load_run

    root = tmp_path_factory.mktemp("expected")
    out = {}
    for name, run in {**native_runs, "remote-code-alibi": runs["alibi"]}.items():
        out[name] = root / f"{name}.safetensors"
        write_expected(load_run(run), out[name])
    return out


@pytest.mark.parametrize("reader", ["transformers-4", "transformers-5"])
@pytest.mark.parametrize("name", CASES)
def test_every_export_is_exact_under_old_and_new_transformers(reader, name, native_exports, exports, expected):
    python = readers_python() if reader == "transformers-4" else Path(sys.executable)
    result = read_with(python, folders(native_exports, exports)[name], expected[name])
    assert result["transformers"].startswith("4." if reader == "transformers-4" else "5.")
    assert result["architecture"] == CLASSES[name]
    assert result["max_logit_diff"] <= TOLERANCE, result
    assert result["greedy_equal"] and result["text_equal"] and result["tokenizer_equal"], result
    assert len(result["greedy"]) > 0


def test_the_check_catches_what_transformers_4_got_wrong(native_exports, expected, tmp_path):
    """The rope export as it was once written (rotary only as rope_parameters): 4.x rotates a quarter of a head."""
    import shutil

    old = tmp_path / "rope-old"
    shutil.copytree(native_exports["rope"], old)
    config = json.loads((old / "config.json").read_text())
    del config["rotary_pct"], config["rotary_emb_base"]
    (old / "config.json").write_text(json.dumps(config))
    result = read_with(readers_python(), old, expected["rope"])
    assert result["max_logit_diff"] > 1e-2  # silently a different model
    assert read_with(Path(sys.executable), old, expected["rope"])["max_logit_diff"] <= TOLERANCE  # 5.x: fine


def test_export_check_with_another_python_fails_on_a_wrong_reading(native_runs, native_exports, tmp_path):
    """``--check-with``: the export reads its folder back with another interpreter's transformers."""
    import shutil

    from alilama_core.base.errors import AlilamaError
    from alilama_core.runs.checkpoint import load_run

    python = str(readers_python())
    loaded = load_run(native_runs["rope"])
    note = check_folder(loaded, native_exports["rope"], [python])
    assert "transformers 4.57" in note and f"({python})" in note and "transformers 5." in note
    old = tmp_path / "rope-old"
    shutil.copytree(native_exports["rope"], old)
    config = json.loads((old / "config.json").read_text())
    del config["rotary_pct"]
    (old / "config.json").write_text(json.dumps(config))
    with pytest.raises(AlilamaError, match=r"read by transformers 4\.57.*logits differ by"):
        check_folder(loaded, old, [python])
    with pytest.raises(AlilamaError, match="--check-with /nonexistent/python: could not run it"):
        check_folder(loaded, native_exports["rope"], ["/nonexistent/python"])


def test_a_wrong_reading_of_remote_code_is_not_told_to_use_remote_code(runs, exports, tmp_path):
    """The advice fits the format: a native export may fall back to remote code, a remote-code one may not."""
    import shutil

    from alilama_core.base.errors import AlilamaError
    from alilama_core.runs.checkpoint import load_run

    folder = tmp_path / "remote"
    shutil.copytree(exports["alibi"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["norm_eps"] = 0.5  # the folder no longer computes the run's model
    (folder / "config.json").write_text(json.dumps(config))
    loaded = load_run(runs["alibi"])
    with pytest.raises(AlilamaError, match="logits differ by") as info:
        check_folder(loaded, folder, [], remote_code=True)
    assert "--format remote-code" not in str(info.value) and "transformers version" in str(info.value)
    with pytest.raises(AlilamaError, match="Use --format remote-code"):
        check_folder(loaded, folder, [])


def test_native_config_json_carries_every_form_its_readers_read(native_exports):
    rope = json.loads((native_exports["rope"] / "config.json").read_text())
    assert rope["rotary_pct"] == 1.0 and rope["rope_parameters"]["partial_rotary_factor"] == 1.0
    assert rope["rotary_emb_base"] == rope["rope_parameters"]["rope_theta"]
    gpt2 = json.loads((native_exports["learned"] / "config.json").read_text())
    assert gpt2["n_ctx"] == gpt2["n_positions"]
    mpt = json.loads((native_exports["alibi-nobias"] / "config.json").read_text())
    assert mpt["architectures"] == ["MPTForCausalLM"] and mpt["model_type"] == "mpt"


# -- the tokenizer of a remote-code export needs no code ------------------------------------------------------

PROMPT = "Do you wish to run the custom code?"  # transformers' question before it runs a folder's code


@pytest.mark.parametrize("reader", ["transformers-4", "transformers-5"])
def test_a_remote_code_exports_tokenizer_loads_without_its_code(reader, exports, runs):
    """With stdin closed and no Alilama: a plain fast tokenizer, the run's ids, and no question asked.

    transformers 5's AutoTokenizer always reads the model's config.json first, whose auto_map names the model's
    code, so it asks before that unless told ``trust_remote_code=False``, as the model card writes it; 4.x does
    not read it when tokenizer_config.json names the class."""
    from alilama_core.runs.checkpoint import load_run

    python = readers_python() if reader == "transformers-4" else Path(sys.executable)
    trust = "" if reader == "transformers-4" else ", trust_remote_code=False"
    code = NO_ALILAMA + textwrap.dedent(
        f"""
        import json
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        tok = AutoTokenizer.from_pretrained(sys.argv[1]{trust})
        assert isinstance(tok, PreTrainedTokenizerFast), type(tok)
        print(json.dumps(tok(sys.argv[2], add_special_tokens=False)["input_ids"]))
        """
    )
    text = "Once upon a time, there was a little girl. Ünïcödé 🙂<|endoftext|>"
    proc = subprocess.run(
        [str(python), "-c", code, str(exports["alibi"]), text],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    assert PROMPT not in proc.stdout + proc.stderr
    ids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ids == load_run(runs["alibi"]).tokenizer.encode(text, allowed_special="all")


# -- ONNX: `alilama export onnx --python` runs optimum-onnx and onnxruntime in the reader environment ---------

ONNX_CASES = ["alibi-nobias", "learned", "rope"]


@pytest.fixture(scope="module")
def onnx_exports(native_runs, tmp_path_factory) -> dict:
    """``alilama export onnx`` of each native run: name -> (folder, the finished command)."""
    from alilama_testing import run_cli

    python = str(readers_python())
    root = tmp_path_factory.mktemp("onnx")
    return {
        name: (root / name, run_cli("export", "onnx", str(native_runs[name]), str(root / name), "--python", python))
        for name in ONNX_CASES
    }


@pytest.mark.parametrize("name", ONNX_CASES)
def test_export_onnx_runs_in_onnxruntime_as_alilama_computes_it(name, onnx_exports):
    from alilama_testing import ok

    from alilama_core.runs.outputs import foreign_entries, kind_of

    out, result = onnx_exports[name]
    assert "for onnxruntime: " in ok(result) and "onnx/model.onnx" in result.stdout
    line = next(x for x in result.stderr.splitlines() if "onnxruntime 1." in x)
    diff = float(line.split("logits within ")[1].split(",")[0])
    assert diff <= 1e-4 and "greedy ids equal" in line
    # transformers.js's layout: the model under onnx/, the configs and the tokenizer at the top
    assert (out / "onnx" / "model.onnx").is_file() and not list(out.glob("*.onnx"))
    for file in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / file).is_file(), file
    assert kind_of(out) == "onnx" and foreign_entries(out, "onnx") == []


TRANSFORMERS_JS = ROOT / "build" / "transformers-js"
JS_PROBE = Path(__file__).resolve().parent / "transformers_js_probe.mjs"


def transformers_js() -> Path:
    """The folder where ``make transformers-js`` installed npm's @huggingface/transformers; skipped when absent
    unless ALILAMA_REQUIRE_TRANSFORMERS_JS=1 (CI)."""
    missing = None
    if shutil.which("node") is None:
        missing = "transformers.js runs in Node.js, and no `node` is on the PATH"
    elif not (TRANSFORMERS_JS / "node_modules" / "@huggingface" / "transformers").is_dir():
        missing = f"transformers.js is not installed in {TRANSFORMERS_JS} (make transformers-js: npm, ~15 s)"
    if missing and os.environ.get("ALILAMA_REQUIRE_TRANSFORMERS_JS") == "1":
        pytest.fail(missing)
    if missing:
        pytest.skip(missing)
    return TRANSFORMERS_JS


@pytest.mark.parametrize("name", ONNX_CASES)
def test_transformers_js_runs_the_onnx_export_as_alilama_computes_it(name, onnx_exports, expected, tmp_path):
    """npm's @huggingface/transformers in Node, offline: the tokenizer's ids, the logits, greedy ids."""
    from safetensors import safe_open

    js = transformers_js()
    with safe_open(expected[name], framework="pt") as f:
        want = {k: f.get_tensor(k) for k in f.keys()}
        meta = f.metadata()
    given = {
        "text": meta["prompt_text"],
        "ids": want["ids"].tolist(),
        "prompt": want["prompt"].tolist(),
        "max_new_tokens": int(meta["max_new_tokens"]),
        "eot": int(meta["eot"]) if meta["eot"] else None,
    }
    (tmp_path / "input.json").write_text(json.dumps(given), encoding="utf-8")
    proc = subprocess.run(
        ["node", str(JS_PROBE), str(js), str(onnx_exports[name][0]), str(tmp_path / "input.json")],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["text_ids"] == given["prompt"]
    logits = torch.tensor(got["logits"]).reshape(got["shape"])
    assert logits.shape == want["logits"].shape
    assert (logits - want["logits"]).abs().max().item() <= 1e-4
    assert got["greedy"] == want["greedy"].tolist() and len(got["greedy"]) > 0


def test_export_onnx_mistakes(runs, native_runs, tmp_path):
    from alilama_testing import run_cli

    nope = run_cli("export", "onnx", str(runs["nope"]), str(tmp_path / "a"), "--python", str(readers_python()))
    assert nope.returncode == 1 and "optimum exports transformers' own architectures" in nope.stderr
    here = run_cli("export", "onnx", str(native_runs["rope"]), str(tmp_path / "b"))  # this Python has no optimum
    assert here.returncode == 1 and "needs optimum-onnx and onnxruntime" in here.stderr
    assert "python -m venv ~/venvs/onnx" in here.stderr and "Traceback" not in here.stderr
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    taken = run_cli("export", "onnx", str(native_runs["rope"]), str(theirs), "--force", "--python", sys.executable)
    assert taken.returncode == 1 and (theirs / "notes.txt").read_text() == "mine"
    assert "--overwrite replaces only an ONNX export" in taken.stderr  # the flag the command documents
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs"]


def test_optimum_refuses_the_remote_code_export(exports, expected, tmp_path):
    from alilama_exporters.onnx_export import SCRIPT

    proc = subprocess.run(
        [
            str(readers_python()),
            str(SCRIPT),
            str(exports["alibi"]),
            str(tmp_path / "o"),
            str(expected["remote-code-alibi"]),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""},
    )
    assert proc.returncode != 0 and "trust_remote_code" in proc.stderr
