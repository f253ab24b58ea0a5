"""No file of a model folder runs without ``trust_remote_code=True``, with or without Alilama.

An exported Alilama folder with a plugin positional scheme names its
standalone module in ``config.json`` (``positional_module``). A crafted folder
can name any file there. Each case below loads a folder in a fresh
interpreter, the way a user would, and checks a marker file that the
folder's payload writes when it is imported: absent unless the user trusted
remote code, and then only run by transformers' own dynamic-module machinery.
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

pytest.importorskip("transformers")
pytest.importorskip("alilama_sinusoidal", reason="the example plugin docs/plugins/alilama-sinusoidal is not installed")

STORY = "Once upon a time, Lily saw a big red ball in the park. She played with her dog until night.\n" * 5

# Imported by the loader, it leaves a marker naming the module it ran as; it is also a working scheme,
# so nothing but the user's trust decides whether it runs.
PAYLOAD = textwrap.dedent(
    """
    import os
    from pathlib import Path

    Path(os.environ["ALILAMA_TEST_MARKER"]).write_text(__name__)

    from torch import nn


    class Sinusoidal(nn.Module):
        kind = "embedding"

        def __init__(self, config):
            super().__init__()
            self.max_positions = None

        def embed(self, positions):
            raise RuntimeError("payload")
    """
)

# The loading process. argv: folder, trust ("true", "false" or "unset"), "block" to play a machine
# without Alilama (every alilama* import fails) or "alilama" to import alilama_hf first, as documented.
LOADER = textwrap.dedent(
    """
    import json, sys
    folder, trust, mode = sys.argv[1:4]
    if mode == "block":
        class NoAlilama:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0].startswith("alilama"):
                    raise ImportError(f"{name} is blocked")
        sys.meta_path.insert(0, NoAlilama())
    else:
        import alilama_hf

        alilama_hf.register_auto_classes()  # the Auto classes, in-process (no remote code)
    from transformers import AutoModelForCausalLM
    kwargs = {} if trust == "unset" else {"trust_remote_code": trust == "true"}
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except Exception as exc:
        print("RESULT", json.dumps({"loaded": False, "error": f"{type(exc).__name__}: {exc}"}))
    else:
        cls = type(model.model.positional)
        print("RESULT", json.dumps({"loaded": True, "positional_class": f"{cls.__module__}.{cls.__name__}"}))
    """
)


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """A remote-code export of a tiny run with the example plugin's ``sinusoidal`` scheme."""
    import torch
    from alilama_bpe.tokenizer import BPETokenizer
    from alilama_exporters.hf_folder import export
    from alilama_testing import tiny_config

    from alilama_core import build_model
    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.runs.checkpoint import save_weights

    root = tmp_path_factory.mktemp("remote-code")
    tokenizer = BPETokenizer.train([STORY], vocab_size=300, special_tokens=["<|endoftext|>"])
    torch.manual_seed(0)
    cfg = tiny_config(
        positional="sinusoidal", vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4, context_length=32
    )
    run = root / "run"
    save_weights(build_model(cfg), run / "final")
    save(Config(model=cfg), run / "config.yaml")
    tokenizer.save(run / "tokenizer")
    out = export(run, root / "export", repo_id="alilama-test/sin", format="remote-code")
    config = json.loads((out / "config.json").read_text())
    assert config["positional_module"] == "positional_sinusoidal"
    assert (out / "positional_sinusoidal.py").is_file()
    return out


def _crafted(export: Path, tmp_path: Path, **config_changes) -> Path:
    """A copy of the export whose config names ``evilpos.py``, a payload beside the weights."""
    folder = tmp_path / "crafted"
    shutil.copytree(export, folder)
    (folder / "evilpos.py").write_text(PAYLOAD)
    config = json.loads((folder / "config.json").read_text())
    config.update({"positional_module": "evilpos", **config_changes})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _load(folder: Path, trust: str, mode: str, tmp_path: Path) -> tuple[dict, str | None]:
    """Load ``folder`` in a fresh interpreter; returns its report and the marker's text (None: absent)."""
    marker = tmp_path / f"marker-{trust}-{mode}"
    marker.unlink(missing_ok=True)
    hf_home = tmp_path / "hf-home"  # transformers copies remote code into HF_HOME/modules
    env = {**os.environ, "ALILAMA_TEST_MARKER": str(marker), "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", LOADER, str(folder), trust, mode],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.rpartition("RESULT ")[2])  # transformers may print a prompt first
    return report, (marker.read_text() if marker.exists() else None)


@pytest.mark.parametrize("mode", ["alilama", "block"])
@pytest.mark.parametrize("trust", ["false", "unset"])
def test_a_crafted_positional_module_never_runs_without_trust(export, tmp_path, trust, mode):
    folder = _crafted(export, tmp_path)
    report, marker = _load(folder, trust, mode, tmp_path)
    assert marker is None, f"the folder's evilpos.py ran as {marker!r} without trust_remote_code"
    assert report["loaded"] is False  # the config names a module no installed plugin provides
    if mode == "alilama":
        assert "evilpos" in report["error"] and "trust_remote_code=True" in report["error"], report


@pytest.mark.parametrize(
    "changes, phrase",
    [
        ({"positional": "evil-scheme"}, "is not installed here"),  # no installed plugin has the name
        ({"positional_module": "../evilpos"}, "must be a Python identifier"),  # a path, not a module name
        ({"positional_module": "alilama_hf.export"}, "must be a Python identifier"),  # a dotted name
        ({"positional_class": "os.system"}, "must be a Python identifier"),
    ],
)
def test_crafted_names_are_refused_in_process(export, tmp_path, changes, phrase):
    folder = _crafted(export, tmp_path, **changes)
    report, marker = _load(folder, "false", "alilama", tmp_path)
    assert marker is None
    assert report["loaded"] is False and phrase in report["error"], report
    assert "{" not in report["error"], report  # every message is filled in


def test_the_installed_plugin_module_is_used_not_the_folders_copy(export, tmp_path):
    """With Alilama installed and no trust, even the module the export wrote is not imported from the folder."""
    folder = tmp_path / "export"
    shutil.copytree(export, folder)
    (folder / "positional_sinusoidal.py").write_text(PAYLOAD)  # as if the folder had been tampered with
    report, marker = _load(folder, "false", "alilama", tmp_path)
    assert marker is None
    assert report == {"loaded": True, "positional_class": "alilama_hf._exported.positional_sinusoidal.Sinusoidal"}


def test_trusted_remote_code_runs_only_through_transformers(export, tmp_path):
    """``trust_remote_code=True`` is the user's consent: then the folder's module runs, as transformers loads it.

    Where ``alilama_hf`` is imported, transformers prefers the registered classes even then, so the
    folder's module still does not run: the in-process class refuses the unknown module instead.
    """
    folder = _crafted(export, tmp_path)
    report, marker = _load(folder, "true", "block", tmp_path)
    assert marker is not None and marker.startswith("transformers_modules."), marker
    assert report["loaded"] is True and report["positional_class"].endswith("evilpos.Sinusoidal"), report
    report, marker = _load(folder, "true", "alilama", tmp_path)
    assert marker is None
    assert report["loaded"] is False and "has not imported alilama_hf" in report["error"], report


def test_a_pickled_optimizer_state_is_not_unpickled_on_resume(tmp_path):
    """Checkpoints hold torch files; resume loads them with ``weights_only=True``: a pickle payload is refused."""
    from alilama_core.runs.stories import write_corpus

    marker = tmp_path / "pickle-marker"
    write_corpus(tmp_path / "corpus.txt", 200, seed=1)
    alilama = [sys.executable, "-m", "alilama_core"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*alilama, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
        )

    corpus = str(tmp_path / "corpus.txt")
    tok_args = ["--vocab-size", "300", "--special", "<|endoftext|>", "--out", "tok"]
    for args in (
        ["tokenizer", "train", "--input", corpus, *tok_args],
        ["data", "prepare", "--input", corpus, "--tokenizer", "tok", "--out", "data", "--val-fraction", "0.1"],
        ["train", "--preset", "tiny", "--no-progress", "model.vocab_size=300", "train.max_steps=2"]
        + ["train.checkpoint_every=2", "train.eval_every=2", "--data", "data", "--out", "run"],
    ):
        proc = run(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    optimizer = next((tmp_path / "run").glob("**/optimizer.pt"))
    payload = (
        "import pickle, os\n"
        "class P:\n"
        f"    def __reduce__(self): return (os.system, ('touch {marker}',))\n"
        f"pickle.dump(P(), open({str(optimizer)!r}, 'wb'))\n"
    )
    subprocess.run([sys.executable, "-c", payload], check=True)
    proc = run("train", "--resume", "run", "train.max_steps=4", "--no-progress")
    assert not marker.exists(), "resume unpickled a code-running object"
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in output, output
    assert "optimizer.pt holds objects other than tensors and plain data, so it was not loaded" in output, output
    assert "weights_only` set to `False`" not in output  # torch's advice to load it unsafely is not passed on
