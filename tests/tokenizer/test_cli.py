"""``alilama tokenizer ...`` through typer's CliRunner, on a throwaway app."""

from __future__ import annotations

import alilama_bpe
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

runner = CliRunner()


@pytest.fixture
def app(impl, monkeypatch):
    if impl == "python":
        monkeypatch.setattr("alilama_bpe.tokenizer.BPETokenizer.backend", "python")
    from alilama_core.app import tokenizer as tokenizer_cli

    a = typer.Typer()
    a.add_typer(tokenizer_cli.tokenizer_app, name="tokenizer")
    return a


@pytest.fixture
def corpus(tmp_path, stories):
    path = tmp_path / "corpus.txt"
    path.write_text(stories[:120_000], encoding="utf-8")
    return path


def test_train_info_encode_decode(app, corpus, tmp_path):
    out = tmp_path / "tok"
    r = runner.invoke(app, ["tokenizer", "train", "--input", str(corpus), "--vocab-size", "512", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "merges" in r.output and "255" in r.output and "tokens/byte" in r.output
    assert (out / "tokenizer.model").is_file()

    r = runner.invoke(app, ["tokenizer", "info", "--tokenizer", str(out), "--json"])
    assert r.exit_code == 0 and '"vocab_size": 512' in r.output

    r = runner.invoke(app, ["tokenizer", "encode", "--tokenizer", str(out), "Once upon a time<|endoftext|>"])
    assert r.exit_code == 0, r.output
    ids = [int(x) for x in r.output.split()]
    assert ids[-1] == 511

    r = runner.invoke(app, ["tokenizer", "decode", "--tokenizer", str(out), *map(str, ids)])
    assert r.exit_code == 0 and r.output == "Once upon a time<|endoftext|>\n"

    npy = tmp_path / "ids.npy"
    r = runner.invoke(app, ["tokenizer", "encode", "-t", str(out), "--input", str(corpus), "--out", str(npy)])
    assert r.exit_code == 0, r.output
    arr = np.load(npy)
    assert arr.dtype == np.uint16
    r = runner.invoke(app, ["tokenizer", "decode", "-t", str(out), "--input", str(npy)])
    assert r.output[:-1] == corpus.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--vocab-size", "100"], "at least 256"),
        (["--vocab-size", "300", "--special", "<|a|>", "--special", "<|a|>"], "given twice"),
        (["--vocab-size", "300", "--errors", "ignore"], "strict"),
    ],
)
def test_train_bad_arguments(app, corpus, tmp_path, args, message):
    r = runner.invoke(app, ["tokenizer", "train", "--input", str(corpus), "--out", str(tmp_path / "t"), *args])
    assert r.exit_code == 1
    assert message in r.output
    assert "Traceback" not in r.output


def test_train_non_utf8_and_empty(app, tmp_path):
    def train(path, *extra):
        return runner.invoke(app, ["tokenizer", "train", "-i", str(path), "-o", str(tmp_path / "t"), *extra])

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok ok ok\n\xff\xfe nope")
    r = train(bad, "-v", "300")
    assert r.exit_code == 1 and "invalid UTF-8 at byte offset 9" in r.output and "bad.txt" in r.output
    r = train(bad, "-v", "260", "--errors", "replace")
    assert r.exit_code == 0, r.output
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    r = train(empty, "-v", "300")
    assert r.exit_code == 1 and "empty" in r.output
    r = train(tmp_path / "none.txt", "-v", "300")
    assert r.exit_code == 1 and "no such input file" in r.output


def test_train_stops_early_and_says_so(app, tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("abcd abcd")
    r = runner.invoke(app, ["tokenizer", "train", "-i", str(small), "-v", "400", "-o", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    assert "stopped early" in r.output and "allows only" in r.output


def test_missing_or_corrupt_tokenizer(app, tmp_path):
    r = runner.invoke(app, ["tokenizer", "info", "-t", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "no such tokenizer" in r.output
    (tmp_path / "tokenizer.model").write_text("garbage\n")
    r = runner.invoke(app, ["tokenizer", "encode", "-t", str(tmp_path), "hi"])
    assert r.exit_code == 1 and "corrupt" in r.output and "Traceback" not in r.output


def test_plugin_registers_the_tokenizer_and_its_importer():
    names = []
    alilama_bpe.register_tokenizers(lambda name, target, **meta: names.append((name, target, meta)))
    assert names == [
        ("bpe", "alilama_bpe.tokenizer:BPETokenizer", {"importer": "alilama_bpe.importers:import_tokenizer"})
    ]
    from alilama_bpe.importers import import_tokenizer
    from alilama_core.engine.registry import get_tokenizer_importer

    assert get_tokenizer_importer("bpe") is import_tokenizer


@pytest.fixture
def one_app():
    from alilama_core.app import tokenizer as tokenizer_cli

    a = typer.Typer()
    a.add_typer(tokenizer_cli.tokenizer_app, name="tokenizer")
    return a


def test_import_goes_through_the_importer_a_plugin_registers(one_app, tmp_path):
    """A third-party tokenizer offers ``tokenizer import --kind NAME`` by registering an importer beside its class."""
    from alilama_bpe.tokenizer import BPETokenizer
    from alilama_core import hookimpl
    from alilama_core.engine.registry import get_registry
    from alilama_core.runs.tokenizers import load_tokenizer, tokenizer_kind

    class Words(BPETokenizer):
        name = "words-bpe"

    calls = []

    def read_words(source, *, pattern=None, special_tokens=None):
        calls.append((str(source), pattern, special_tokens))
        return Words.load(source), f"a words model {source}"

    class Plugin:
        @hookimpl
        def register_tokenizers(self, register):
            register("words-bpe", Words, importer=read_words)

    model = tmp_path / "src"
    BPETokenizer.train(["one two three one two"] * 4, 262, special_tokens=["<|endoftext|>"]).save(model)
    registry = get_registry()
    registry.register_plugin(Plugin(), name="words-plugin")
    try:
        out = tmp_path / "tok"
        args = ["tokenizer", "import", str(model / "tokenizer.model"), "--kind", "words-bpe", "--out", str(out)]
        r = runner.invoke(one_app, [*args, "--special", "<|x|>=300"])
        assert r.exit_code == 0, r.output
        assert calls == [(str(model / "tokenizer.model"), None, {"<|x|>": 300})]
        assert "a words model" in r.output and "words-bpe" in r.output
        assert tokenizer_kind(out) == "words-bpe" and type(load_tokenizer(out)) is Words
        r = runner.invoke(one_app, ["tokenizer", "import", "gpt2", "--kind", "symbols", "--out", str(tmp_path / "s")])
        assert r.exit_code == 1 and "'symbols' cannot import a vocabulary" in r.output
        assert "tokenizers that can: bpe, words-bpe" in r.output and not (tmp_path / "s").exists()
    finally:
        registry.unregister_plugin("words-plugin")
    r = runner.invoke(one_app, ["tokenizer", "import", "gpt2", "--kind", "nope", "--out", str(tmp_path / "n")])
    assert r.exit_code == 1 and "nope" in r.output and "bpe" in r.output and "Traceback" not in r.output


def test_import_prints_the_tokenizers_fallback_notice(one_app, tmp_path):
    from alilama_bpe import _backend
    from alilama_bpe.tokenizer import BPETokenizer

    BPETokenizer.train(["one two three"] * 4, 260, pattern=r"\w+|\s+").save(tmp_path / "src")
    r = runner.invoke(
        one_app, ["tokenizer", "import", str(tmp_path / "src" / "tokenizer.model"), "-o", str(tmp_path / "a")]
    )
    assert r.exit_code == 0, r.output
    why = "the native module is not built" if _backend.native is None else "the native pre-tokenizer does not know it"
    assert f"notice: this split pattern runs on the pure-Python reference ({why})" in " ".join(r.output.split())
    if _backend.native is not None:  # the default pattern runs natively; the reference asked for is no fallback
        assert BPETokenizer([]).fallback_notice() is None
        assert BPETokenizer([], backend="python").fallback_notice() is None


def test_plugin_import_is_light():
    import subprocess
    import sys

    heavy = ("torch", "numpy", "alilama_bpe._native", "typer")
    code = f"import sys, alilama_bpe; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
