"""Text generation with the real BPE tokenizer: streaming, stop strings, the CLI."""

from __future__ import annotations

import pytest
import torch
from alilama_testing import run_cli, tiny_config

from alilama_core.engine import configs as cfgmod
from alilama_core.engine.generation import SamplingSettings, decode_stream, generate, stream_text
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_tokenizer
from alilama_core.runs.checkpoint import save_weights

TEXT = 'Once upon a time, Zoë met 世界 and said "héllo 🎉". Ça va? Ünïcödé!\n' * 20


@pytest.fixture(scope="module")
def tokenizer():
    return get_tokenizer("bpe").train([TEXT], 300, special_tokens=["<|endoftext|>"])


@pytest.fixture(scope="module")
def run_dir(tokenizer, tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    cfg = cfgmod.Config(model=tiny_config(vocab_size=tokenizer.vocab_size, context_length=64, attention="auto"))
    torch.manual_seed(0)
    model = build_model(cfg.model)
    x = torch.tensor([tokenizer.encode(TEXT)[:65]] * 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(30):  # a model trained for a few steps
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    cfgmod.save(cfg, run / "config.yaml")
    save_weights(model, run / "final")
    tokenizer.save(run / "tokenizer")
    return run


def test_streaming_decode_never_emits_a_broken_character(tokenizer):
    ids = tokenizer.encode(TEXT[:80])
    split = [i for i in ids if len(tokenizer.decode_bytes([i])) and not _valid(tokenizer.decode_bytes([i]))]
    assert split, "the test text should split some characters across tokens"
    pieces = list(decode_stream(tokenizer, iter(ids)))
    assert "".join(pieces) == TEXT[:80]
    assert all("\ufffd" not in p for p in pieces)


def _valid(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_stream_text_equals_generate_and_stops_at_stop_strings(run_dir):
    from alilama_core.runs.checkpoint import load_run

    loaded = load_run(run_dir)
    settings = SamplingSettings(max_new_tokens=40, temperature=0)
    streamed = "".join(stream_text(loaded.model, loaded.tokenizer, "Once upon", settings))
    ids = generate(loaded.model, [loaded.tokenizer.encode("Once upon")], settings, eot_id=loaded.tokenizer.eot_id)
    assert streamed == loaded.tokenizer.decode(ids[0])
    stop = streamed[5:8]
    cut = "".join(
        stream_text(
            loaded.model, loaded.tokenizer, "Once upon", SamplingSettings(max_new_tokens=40, temperature=0, stop=[stop])
        )
    )
    assert cut == streamed[: streamed.index(stop) + len(stop)]
    trimmed = generate(
        loaded.model,
        [loaded.tokenizer.encode("Once upon")],
        SamplingSettings(max_new_tokens=40, temperature=0, stop=[stop]),
        eot_id=loaded.tokenizer.eot_id,
        decode=loaded.tokenizer.decode,
    )
    assert loaded.tokenizer.decode(trimmed[0]).endswith(stop)


def test_generate_cli_streams_text(run_dir, tmp_path):
    result = run_cli("generate", str(run_dir), "--prompt", "Once upon", "-n", "20", "--temperature", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Once upon") and len(result.stdout) > len("Once upon") + 5
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Zoë met")
    from_file = run_cli("generate", str(run_dir), "--prompt-file", str(prompt), "-n", "5", "--seed", "1")
    assert from_file.returncode == 0 and from_file.stdout.startswith("Zoë met")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9")
    failed = run_cli("generate", str(run_dir), "--prompt-file", str(bad))
    assert failed.returncode == 1 and "not valid UTF-8 (byte offset 3)" in failed.stderr
    missing = run_cli("generate", str(tmp_path / "nope"), "--prompt", "x")
    assert missing.returncode == 1 and "not an Alilama run folder" in missing.stderr


def test_generate_cli_reads_stdin(run_dir):
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from alilama_core.app.cli import main; main()",
            "generate",
            str(run_dir),
            "--prompt",
            "-",
            "-n",
            "5",
        ],
        input="Once",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.startswith("Once")


def test_the_generate_example_of_the_api_docs_runs(run_dir, capsys):
    """docs/api.md's "Generate" block, run as written on a real run: ``generate`` is the function."""
    import re
    from pathlib import Path

    import alilama_core
    import alilama_core.engine.generation  # imported first, as the CLI does: it must not shadow the function
    from alilama_core.runs.checkpoint import load_run

    assert alilama_core.generate is alilama_core.engine.generation.generate and callable(alilama_core.generate)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    block = re.search(r"## Generate\n\n```python\n(.*?)```", doc, re.S)
    assert block, "docs/api.md lost its '## Generate' python block"
    scope = {"run": load_run(run_dir)}
    exec(compile(block.group(1), "docs/api.md#generate", "exec"), scope)
    ids = scope["ids"]
    assert isinstance(ids, list) and len(ids) == 2 and all(isinstance(row, list) and row for row in ids)
    assert capsys.readouterr().out.strip(), "the example printed no text"


def test_an_id_past_the_tokenizer_shows_as_a_replacement_character():
    """A model wider than its tokenizer (a padded vocabulary) can sample ids the tokenizer cannot spell."""
    from alilama_bpe.tokenizer import BPETokenizer

    from alilama_core.engine.generation import UNSPELLABLE, decode_stream, token_bytes

    tok = BPETokenizer.train(["hello there, hello world"], vocab_size=260)
    past = tok.vocab_size + 5
    assert token_bytes(tok, past) == UNSPELLABLE == "\ufffd".encode()
    assert "".join(decode_stream(tok, iter([*tok.encode("hi "), past, *tok.encode(" ok")]))) == "hi \ufffd ok"
