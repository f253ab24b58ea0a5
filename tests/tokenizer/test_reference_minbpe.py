"""Training without special tokens gives exactly minbpe RegexTokenizer's merges.

The ``minbpe`` fixture (conftest.py) is a minimal, independent rewrite of what
minbpe's RegexTokenizer does; it shares no code with alilama_bpe.
"""

from __future__ import annotations

import doctest
import warnings

import pytest
from alilama_bpe import reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def test_reference_doctests():
    assert doctest.testmod(reference).failed == 0


def test_tokenizer_doctests(bpe, monkeypatch):
    from alilama_bpe import tokenizer

    monkeypatch.setattr(tokenizer.BPETokenizer, "backend", bpe.backend)
    assert doctest.testmod(tokenizer).failed == 0


def test_incremental_trainer_equals_naive_reference(stories):
    counts = reference.count_chunks([stories[:120_000]], specials=["<|endoftext|>"])
    assert reference.train_incremental(counts, 300) == reference.train(counts, 300)


def test_pattern_is_gpt4(minbpe):
    assert reference.GPT4_SPLIT_PATTERN == minbpe.pattern


@pytest.mark.parametrize(
    "text",
    [
        "aaabdaaabac",
        "aaaa aaaa aaa a",
        "abababab abab ba ba ba",
        "hello hello world world hello wor",
        "I'm He'LL we'VE 12345 안녕 😉 \r\n\n  x  \t y",
        "x" * 50 + " " + "xy" * 20,
    ],
)
def test_merges_equal_minbpe_on_tricky_text(bpe, minbpe, text):
    expected = minbpe.merges(text, 256 + 60)
    tok = bpe.train([text], 256 + 60) if len(expected) == 60 else None
    if tok is None:
        with pytest.warns(UserWarning, match="allows only"):
            tok = bpe.train([text], 256 + 60)
        assert tok.stopped_early
    assert tok.merges == expected
    assert tok.encode(text, allowed_special="none") == minbpe.encode(text, expected)


@pytest.mark.slow  # trains on real text in both trainers
def test_merges_equal_minbpe_on_real_text(bpe, minbpe, stories, book):
    text = stories[:60_000] + book[:40_000]
    expected = minbpe.merges(text, 256 + 120)
    tok = bpe.train([text], 256 + 120)
    assert tok.merges == expected
    sample = stories[-20_000:]
    assert tok.encode(sample, allowed_special="none") == minbpe.encode(sample, expected)


def test_several_texts_act_like_their_concatenation_at_safe_cuts(bpe, minbpe):
    # Tie-breaking follows first occurrence across the whole stream of texts.
    texts = ["b a b a\n", "a b a b\n", "zz yy zz yy\n"]
    assert bpe.train(texts, 256 + 6).merges == minbpe.merges("".join(texts), 256 + 6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.text(alphabet="ab c\n'1é", min_size=1, max_size=12), min_size=1, max_size=40),
    vocab=st.integers(min_value=257, max_value=256 + 40),
)
def test_merges_equal_minbpe_on_generated_text(bpe, minbpe, words, vocab):
    # Few distinct characters: long runs, overlapping pairs ("aaa"), ties everywhere,
    # symbols merged on both sides, and texts that run out of pairs.
    text = "".join(words)
    expected = minbpe.merges(text, vocab)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = bpe.train([text], vocab)
    assert tok.merges == expected
    assert tok.encode(text, allowed_special="none") == minbpe.encode(text, expected)
