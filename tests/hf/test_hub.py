"""What a Hub user does, offline: load the export from the Hub cache in a process without Alilama.

Also the CLI: ``alilama export hf`` through CliRunner, and ``alilama push`` failing
fast (no token; no network) in a fresh process with a clean Hugging Face home.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from alilama_testing import NO_ALILAMA, SCHEMES

from alilama_core.engine.generation import SamplingSettings, generate
from alilama_core.runs.checkpoint import load_run

USER = "alilama-test"
PROMPT = "Once upon a time, Lily saw"
N_NEW = 40  # past the 32-token training context of most runs


def lay_out_like_the_hub_cache(folder: Path, hf_home: Path, repo_id: str) -> str:
    """Copy ``folder`` into ``hf_home`` as ``huggingface_hub`` caches a download; returns the revision.

    ``hub/models--USER--NAME/blobs/<etag>`` holds each file once, named by its
    sha256 for LFS files (weights) and by its git blob sha1 otherwise;
    ``snapshots/<revision>/`` holds relative symlinks to the blobs and
    ``refs/main`` names the revision.
    """
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    revision = hashlib.sha1(f"{repo_id}@{time.time_ns()}".encode()).hexdigest()
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        if path.suffix == ".safetensors":
            etag = hashlib.sha256(data).hexdigest()
        else:
            etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (repo / "blobs" / etag).write_bytes(data)
        (snapshot / path.name).symlink_to(Path("..", "..", "blobs", etag))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return revision


# Runs in a fresh interpreter. Its first statement makes every alilama* module unimportable.
HUB_USER = NO_ALILAMA + textwrap.dedent(
    """
    import json, os
    try:
        import alilama_core
        blocked = False
    except ImportError:
        blocked = True
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, pipeline

    expected = json.load(open(sys.argv[1]))
    results = {"alilama_blocked": blocked, "offline": os.environ.get("HF_HUB_OFFLINE"), "models": {}}
    for key, want in expected.items():
        repo, remote = want["repo"], want["remote_code"]
        # As a Hub user types it; for remote code, trust_remote_code=False loads the tokenizer without a prompt.
        tok = AutoTokenizer.from_pretrained(repo, **({"trust_remote_code": False} if remote else {}))
        trust = {"trust_remote_code": True} if remote else {}
        model = AutoModelForCausalLM.from_pretrained(repo, **trust).eval()
        base = AutoModel.from_pretrained(repo, **trust).eval()
        ids = tok(want["prompt"], return_tensors="pt").input_ids
        long_ids = torch.tensor([want["long_ids"]])
        with torch.no_grad():
            logits = model(long_ids).logits[0]
            hidden = base(ids).last_hidden_state
        diff = (logits - torch.tensor(want["logits"])).abs().max().item()
        out = model.generate(ids, max_new_tokens=want["n_new"], do_sample=False)
        new = out[0, ids.shape[1]:].tolist()
        if tok.eos_token_id in new:
            new = new[: new.index(tok.eos_token_id)]
        generator = pipeline("text-generation", model=model, tokenizer=tok)
        text = generator(want["prompt"], max_new_tokens=8, do_sample=False)[0]["generated_text"]
        embed = model.get_input_embeddings().weight
        results["models"][key] = {
            "ids": ids[0].tolist(),
            "max_abs_logit_diff": diff,
            "greedy": new,
            "model_class": f"{type(model).__module__}.{type(model).__name__}",
            "base_class": f"{type(base).__module__}.{type(base).__name__}",
            "hidden_shape": list(hidden.shape),
            "tied": model.get_output_embeddings().weight is embed,
            "pipeline_text": text,
            "model_max_length": tok.model_max_length,
        }
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)
    """
)
NATIVE_CLASSES = {"alibi-nobias": "MptForCausalLM", "learned": "GPT2LMHeadModel", "rope": "GPTNeoXForCausalLM"}
N_LONG = 48  # past the 32-token training context of the ALiBi, RoPE, NoPE and sinusoidal runs


def _expected(run: Path, repo_id: str, remote_code: bool) -> dict:
    loaded = load_run(run)
    ids = loaded.tokenizer.encode(PROMPT)
    long_ids = (loaded.tokenizer.encode(PROMPT * 8) * 2)[:N_LONG]
    with torch.no_grad():
        logits = loaded.model(torch.tensor([long_ids]))[0]
    greedy = generate(
        loaded.model, [ids], SamplingSettings(max_new_tokens=N_NEW, temperature=0), eot_id=loaded.tokenizer.eot_id
    )[0]
    return dict(
        repo=repo_id,
        prompt=PROMPT,
        ids=ids,
        long_ids=long_ids,
        logits=logits.tolist(),
        greedy=greedy,
        n_new=N_NEW,
        remote_code=remote_code,
        d_model=loaded.config.model.d_model,
        context_length=loaded.config.model.context_length,
    )


def run_as_hub_user(tmp_path: Path, folders: dict[str, tuple[Path, Path, bool]]) -> tuple[dict, dict]:
    """Lay out each export in a Hub cache and load it in a process that cannot import Alilama, offline."""
    hf_home = tmp_path / "hf_home"
    expected = {}
    for key, (run, folder, remote_code) in folders.items():
        repo_id = f"{USER}/tiny-{key}"
        lay_out_like_the_hub_cache(folder, hf_home, repo_id)
        expected[key] = _expected(run, repo_id, remote_code)
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-c", HUB_USER, str(tmp_path / "expected.json"), str(tmp_path / "results.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["alilama_blocked"] is True and results["offline"] == "1"
    return expected, results["models"]


def test_hub_round_trip_in_a_process_without_alilama(
    tmp_path, runs, exports, native_runs, native_exports, plugin_run, plugin_export, kerple_run, kerple_export
):
    folders = {f"remote-{s}": (runs[s], exports[s], True) for s in SCHEMES}
    folders.update({f"native-{k}": (native_runs[k], native_exports[k], False) for k in native_exports})
    folders["plugin-sinusoidal"] = (plugin_run, plugin_export, True)
    folders["plugin-kerple-log"] = (kerple_run, kerple_export, True)  # a learnable bias, trained
    expected, got_all = run_as_hub_user(tmp_path, folders)
    for key, want in expected.items():
        got = got_all[key]
        assert got["ids"] == want["ids"], key  # AutoTokenizer encodes like Alilama
        assert got["max_abs_logit_diff"] < 1e-5, (key, got["max_abs_logit_diff"])
        assert got["greedy"] == want["greedy"], key  # token for token, past the training context too
        assert got["hidden_shape"] == [1, len(want["ids"]), want["d_model"]]
        assert got["tied"] is True, key
        assert got["pipeline_text"].startswith(PROMPT) and len(got["pipeline_text"]) > len(PROMPT)
        assert got["model_max_length"] == want["context_length"]
        if want["remote_code"]:
            assert got["model_class"].startswith("transformers_modules.") and got["model_class"].endswith(
                "modeling_alilama.AlilamaForCausalLM"
            ), key
            assert got["base_class"].endswith("modeling_alilama.AlilamaModel")
        else:  # transformers' own class, no remote code
            name = NATIVE_CLASSES[key.removeprefix("native-")]
            assert got["model_class"].startswith("transformers.models.") and got["model_class"].endswith(name), key
    mpt = expected["native-alibi-nobias"]
    assert len(mpt["long_ids"]) > mpt["context_length"]  # MPT's ALiBi ran past the training context


# -- CLI ---------------------------------------------------------------------------------


def test_export_cli(tmp_path, runs, native_runs):
    from typer.testing import CliRunner

    from alilama_core.app.cli import get_app

    app = get_app()
    runner = CliRunner()
    out = tmp_path / "exported"
    result = runner.invoke(app, ["export", "hf", str(runs["rope"]), str(out), "--dataset", "roneneldan/TinyStories"])
    assert result.exit_code == 0, result.output
    assert "as native (gpt_neox)" in result.output and "model.safetensors" in result.output
    assert not (out / "modeling_alilama.py").exists()  # RoPE: transformers' GPT-NeoX, no code
    assert "no --license given" in result.output
    card = (out / "README.md").read_text()
    assert "datasets:\n- roneneldan/TinyStories" in card and "license:" not in card.split("---")[1]
    assert "No license was given" in card

    again = runner.invoke(app, ["export", "hf", str(runs["rope"]), str(out)])
    message = " ".join(again.output.split())
    assert again.exit_code == 1 and "already holds a Hugging Face export; pass --overwrite to replace it" in message
    forced = runner.invoke(
        app,
        ["export", "hf", str(runs["rope"]), str(out), "--force", "--format", "remote-code", "--license", "apache-2.0"],
    )
    assert forced.exit_code == 0 and "as remote-code" in forced.output
    assert (out / "modeling_alilama.py").is_file() and "license: apache-2.0" in (out / "README.md").read_text()
    back = runner.invoke(app, ["export", "hf", str(runs["rope"]), str(out), "--force"])
    assert back.exit_code == 0 and not (out / "modeling_alilama.py").exists()  # no stale code from before

    # ALiBi with biases has no transformers architecture: native is refused with the reason, auto falls back.
    refused = runner.invoke(app, ["export", "hf", str(runs["alibi"]), str(tmp_path / "n"), "--format", "native"])
    assert refused.exit_code == 1
    message = " ".join(refused.output.split())
    assert "MPT has no linear or norm biases" in message and "--format remote-code" in message
    auto = runner.invoke(app, ["export", "hf", str(runs["alibi"]), str(tmp_path / "a")])
    assert auto.exit_code == 0 and "as remote-code" in auto.output
    assert "not a transformers architecture" in (tmp_path / "a" / "README.md").read_text()
    mpt = runner.invoke(app, ["export", "hf", str(native_runs["alibi-nobias"]), str(tmp_path / "m")])
    assert mpt.exit_code == 0 and "as native (mpt)" in mpt.output

    bad = runner.invoke(app, ["export", "hf", str(runs["rope"]), str(tmp_path / "b"), "--format", "onnx"])
    assert bad.exit_code == 1 and "--format must be one of auto, native, remote-code" in bad.output
    bad = runner.invoke(app, ["export", "hf", str(runs["rope"]), str(tmp_path / "b"), "--license", "My License"])
    assert bad.exit_code == 1 and "Hub license id" in bad.output
    missing = runner.invoke(app, ["export", "hf", str(tmp_path / "nowhere"), str(tmp_path / "x")])
    assert missing.exit_code == 1 and "not an Alilama run folder" in missing.output


def _push(run: Path, tmp_path: Path, **env_overrides) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    empty_home = tmp_path / "empty_hf_home"
    empty_home.mkdir(exist_ok=True)
    env.update(HF_HOME=str(empty_home), COLUMNS="200", **env_overrides)
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from alilama_core.app.cli import main; main()",
            "push",
            str(run),
            "--repo",
            "someone/tiny",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.perf_counter() - started


def test_push_without_a_token_fails_fast_and_says_how_to_log_in(tmp_path, runs):
    proc, seconds = _push(runs["alibi"], tmp_path)
    assert proc.returncode == 1
    message = " ".join((proc.stderr + proc.stdout).split())
    assert "no Hugging Face token found" in message and "hf auth login" in message and "HF_TOKEN" in message
    assert seconds < 30


def test_push_without_network_fails_fast_and_says_so(tmp_path, runs):
    # A token, but the Hub endpoint is a closed local port: the check must answer at once.
    proc, seconds = _push(runs["alibi"], tmp_path, HF_TOKEN="hf_not_a_real_token", HF_ENDPOINT="http://127.0.0.1:9")
    assert proc.returncode == 1
    message = " ".join((proc.stderr + proc.stdout).split())
    assert "cannot reach the Hugging Face Hub" in message
    assert seconds < 30


def test_import_is_light_and_register_auto_classes_registers_them(exports, tmp_path):
    """``import alilama_hf`` stays light and installs no import hook; ``register_auto_classes()`` registers."""
    code = textwrap.dedent(
        f"""
        import sys
        meta_path = list(sys.meta_path)
        import alilama_hf
        assert "transformers" not in sys.modules and "torch" not in sys.modules, "import alilama_hf must stay light"
        assert sys.meta_path == meta_path, "import alilama_hf must install no import hook"
        assert alilama_hf.register_auto_classes()
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(exports["nope"])!r})  # no trust_remote_code
        print(type(model).__module__)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "alilama_hf.modeling_alilama"
