"""Each split pattern the native pre-tokenizer knows equals the ``regex`` module's ``findall``.

As ``test_pretokenize.py`` does for Alilama's GPT-4 pattern: tricky strings, real
text and generated text from every Unicode plane, for GPT-2's pattern (both
spellings), tiktoken's cl100k_base and Llama-3's. A pattern the native code does
not know runs on the reference.
"""

from __future__ import annotations

import random

import pytest
import regex
from alilama_bpe import _backend, patterns
from alilama_bpe.tokenizer import BPETokenizer

from tests.tokenizer.test_pretokenize import _pool

KNOWN = [(name, patterns.NAMES[name]) for name in ("gpt2", "r50k", "cl100k", "llama3", "o200k", "gpt4")]
KNOWN.append(("cl100k-hf", patterns.CL100K_HF))
assert {p for _, p in KNOWN} == set(patterns.NATIVE_SPLIT)  # every pattern the native code claims
ENDINGS = ["", " ", "  ", "\n", " \n", "\n ", " \n  ", "\r\n\t ", "\u3000", "x", "'s", "1", "!\n/", "\u0301"]
CASED = "AbCDeF ǅǄǆ ʰʱ 日本 e\u0301 \u0301 Ab\u0301c AB'S ab'll x'ſ ΑβΓ ﬀ ǈj"  # o200k_base's cased classes


@pytest.fixture(params=KNOWN, ids=[n for n, _ in KNOWN])
def pattern(request) -> tuple[str, str]:
    if _backend.native is None:
        pytest.skip(f"native BPE backend: {_backend.IMPORT_ERROR}")
    return request.param


def native_split(pattern: str):
    kind = patterns.native_split(pattern)
    return lambda text: _backend.native.split(text, kind)


def test_tricky_strings_and_endings(pattern, tricky):
    _, pat = pattern
    split = native_split(pat)
    for s in [*tricky, CASED]:
        for end in ENDINGS:  # whitespace that ends the text is where the patterns differ
            for text in (s + end, end + s, s + end + s):
                assert split(text) == regex.findall(pat, text), repr(text)


def test_real_text(pattern, stories, book):
    _, pat = pattern
    split = native_split(pat)
    assert split(stories) == regex.findall(pat, stories)
    assert split(book) == regex.findall(pat, book)


@pytest.mark.parametrize("seed", range(2))
def test_generated_text_covering_every_plane(pattern, seed):
    _, pat = pattern
    split = native_split(pat)
    rng = random.Random(seed)
    pool = _pool(rng)
    for _ in range(300):
        s = "".join(rng.choice(pool) for _ in range(rng.randint(1, 80)))
        assert split(s) == regex.findall(pat, s), repr(s)


def test_the_patterns_really_differ():
    """The cases that tell the native pre-tokenizers apart (so a wrong choice would fail above)."""
    text = "a  \n  b's 12345  \n  "
    if _backend.native is None:
        pytest.skip(f"native BPE backend: {_backend.IMPORT_ERROR}")
    got = {n: _backend.native.split(text, patterns.native_split(patterns.NAMES[n])) for n in ("gpt2", "cl100k", "gpt4")}
    for name, chunks in got.items():
        assert chunks == regex.findall(patterns.NAMES[name], text)
    assert len({tuple(v) for v in got.values()}) == 3


def test_unknown_pattern_uses_the_reference():
    words = r"\w+|\s+|[^\w\s]+"
    tok = BPETokenizer([(104, 105)], {}, words)
    assert tok.implementation == "python" and tok.encode("hi, hi") == [256, 44, 32, 256]
    if _backend.native is not None:
        with pytest.raises(Exception, match="does not know the split pattern"):
            BPETokenizer([], {}, words, backend="native")


@pytest.mark.parametrize("name", ["gpt2", "cl100k", "o200k"])
def test_threads_and_files_cut_text_where_chunks_do_not_change(name, book, tmp_path):
    """Long texts are cut into pieces for threads and file blocks; GPT-2's split needs stricter cuts.

    Half the line ends below are cuts for the GPT-4 rule but not for GPT-2's
    (``"word  \\n|next"``: GPT-2 gives the run's last space a chunk of its own).
    """
    if _backend.native is None:
        pytest.skip(f"native BPE backend: {_backend.IMPORT_ERROR}")
    pat = patterns.NAMES[name]
    tok = BPETokenizer.train([book[:50_000]], 400)
    native = BPETokenizer(tok.merges, {}, pat)
    unit = "word  \nnext line\n\n  indented\n:\n/path\n" * 3000 + book[:60_000] + "end.\n"
    expected = BPETokenizer(tok.merges, {}, pat, backend="python").encode(unit)
    assert native.encode(unit) == expected
    assert native._enc.encode(unit * 4, [], 4) == expected * 4  # pieces of a long text on 4 threads
    path = tmp_path / "t.txt"
    path.write_text(unit * 120, encoding="utf-8")  # over one 16 MiB block
    assert native.encode_file(path, threads=2).tolist() == expected * 120
