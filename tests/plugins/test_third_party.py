"""Four third-party plugin packages (tests/plugins/alilama-*), installed with pip, driven through the CLI.

``kerple-log`` (a learnable bias), ``hf-bpe`` (a tokenizer over Hugging Face
``tokenizers``), ``labelled`` (a subclass of the default trainer) and ``chunked``
(an attention backend) each pass the conformance kit, then one pipeline uses
all four: tokenizer train, data prepare, train, a killed and resumed run, eval
at longer contexts, generate, and a Hugging Face export.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alilama_testing import killed_and_resumed, needs_test_plugins, ok
from alilama_testing import run_cli as cli

from alilama_core.kit.attention import check_attention_backend
from alilama_core.kit.positional import check_positional_scheme
from alilama_core.kit.tokenizer import check_tokenizer
from alilama_core.kit.trainer import check_trainer

HERE = Path(__file__).resolve().parent
PACKAGES = {
    "alilama-kerple": "kerple-log",
    "alilama-hftok": "hf-bpe",
    "alilama-labelled": "labelled",
    "alilama-chunked": "chunked",
}


pytestmark = needs_test_plugins(*PACKAGES)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root / "train.txt", 300, seed=1)
    write_corpus(root / "val.txt", 30, seed=2)
    return root / "train.txt", root / "val.txt"


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> tuple[Path, Path]:
    """A tokenizer of the plugin kind ``hf-bpe``, and data prepared with it, through the CLI."""
    train, _ = corpus
    root = tmp_path_factory.mktemp("pipeline")
    tok, data = root / "tok", root / "data"
    out = ok(
        cli(
            "tokenizer",
            "train",
            "--kind",
            "hf-bpe",
            "-i",
            str(train),
            "-v",
            "384",
            "-o",
            str(tok),
            "--option",
            "min_frequency=2",
        )
    )
    assert "hf-bpe" in out and "tokens/byte" in out
    assert json.loads((tok / "alilama_tokenizer.json").read_text())["kind"] == "hf-bpe"
    info = json.loads(ok(cli("tokenizer", "info", "-t", str(tok), "--json")))
    assert info["kind"] == "hf-bpe" and info["vocab_size"] == 384 and info["library"] == "tokenizers"
    ids = ok(cli("tokenizer", "encode", "-t", str(tok), "Once upon a time<|endoftext|>")).split()
    assert int(ids[-1]) == info["special_tokens"]["<|endoftext|>"]
    assert ok(cli("tokenizer", "decode", "-t", str(tok), *ids)) == "Once upon a time<|endoftext|>\n"
    ok(cli("data", "prepare", "-i", str(train), "--tokenizer", str(tok), "-o", str(data)))
    assert (data / "train.bin").is_file()
    return tok, data


# "flex": every registered backend (flex compiles per shape: slow tier); "no-flex": the backends without a compile.
@pytest.mark.parametrize("on", ["flex", "no-flex"])
def test_kerple_log_conforms(on):
    backends = None if on == "flex" else ["eager", "sdpa", "tiled", "chunked"]
    done = check_positional_scheme("kerple-log", options={"r1": 0.5, "r2": 2.0}, backends=backends)
    assert "gradients reach parameters; bias follows them" in done and "chunked == eager" in done


def test_chunked_backend_conforms():
    assert "alibi == eager" in check_attention_backend("chunked")


def test_hf_tokenizer_conforms():
    assert "save and load" in check_tokenizer("hf-bpe", vocab_size=320)


def test_trainer_subclass_conforms(prepared):
    _, data = prepared
    assert "stop and resume" in check_trainer("labelled", data)


def test_unknown_plugin_settings_are_refused(prepared):
    _, data = prepared
    r = cli(
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data),
        "--out",
        str(data.parent / "bad"),
        "model.positional=kerple-log",
        "model.positional_options.r3=1",
    )
    assert r.returncode == 1 and "'r3'" in r.stderr and "r1, r2" in r.stderr and "Traceback" not in r.stderr
    r = cli(
        "tokenizer",
        "train",
        "--kind",
        "hf-bpe",
        "-i",
        str(data / "meta.json"),
        "-v",
        "300",
        "-o",
        str(data.parent / "t2"),
        "--option",
        "merges=3",
    )
    assert r.returncode == 1 and "'merges'" in r.stderr and "min_frequency" in r.stderr


def test_pipeline_through_the_cli(corpus, prepared):
    _, val = corpus
    tok, data = prepared
    run = data.parent / "run"
    args = [
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data),
        "--no-progress",
        "model.positional=kerple-log",
        "model.positional_options.r2=0.5",
        "model.attention=chunked",
        "model.attention_options.chunk=8",
        "model.context_length=32",
        "train.trainer=labelled",
        "train.trainer_options.label=third-party",
        "train.max_steps=60",
        "train.checkpoint_every=2",
        "train.eval_every=20",
        "train.batch_size=4",
        "train.sample_every=1000",
        "train.device=cpu",
    ]
    # killed (SIGKILL) once it has written a checkpoint (many steps before its end), then resumed
    killed_and_resumed(args, run)
    assert (run / "label.txt").read_text().startswith("third-party step 60")
    saved = (run / "config.yaml").read_text()
    assert "kerple-log" in saved and "chunk: 8" in saved and "label: third-party" in saved

    # The scheme's parameters trained: r1/r2 moved away from their initial values.
    from alilama_core.runs.checkpoint import load_run

    loaded = load_run(run)
    assert type(loaded.tokenizer).__name__ == "HFByteBPE"
    assert loaded.model.positional.raw_r1.detach().std() > 0 or loaded.model.positional.raw_r2.detach().std() > 0

    rows = json.loads(ok(cli("eval", str(run), "--data", str(val), "--context-lengths", "32,64,128", "--json")))
    assert [r["context_length"] for r in rows] == [32, 64, 128]
    assert all(r["bpb"] is not None and 0 < r["bpb"] < 20 for r in rows)

    text = ok(cli("generate", str(run), "--prompt", "Once upon a time", "-n", "12", "--temperature", "0"))
    assert text.startswith("Once upon a time") and len(text) > len("Once upon a time\n")

    # The scheme ships a standalone module (export_source), so it exports as remote code and round-trips.
    out = run.parent / "hf"
    ok(cli("export", "hf", str(run), str(out)))
    config = json.loads((out / "config.json").read_text())
    assert config["positional"] == "kerple-log" and (out / "tokenizer.json").is_file()
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    x = torch.randint(0, loaded.config.model.vocab_size, (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, loaded.model(x), rtol=1e-4, atol=1e-4)
