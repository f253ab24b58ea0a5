"""``decode(encode(s)) == s`` for arbitrary strings, and native == reference on them."""

from __future__ import annotations

import pytest
from alilama_bpe import reference
from alilama_bpe.tokenizer import BPETokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_TRAIN = (
    "The quick brown fox jumps over the lazy dog. It's 2024!! Ünïcödé, 日本語, emoji 😀👍🏽\n"
    "  indented\r\n\ttabs   and 12345 numbers; I'LL we'd they're\n"
) * 20


@pytest.fixture(scope="module")
def merges():
    return BPETokenizer.train([_TRAIN], 256 + 100, backend="python").merges


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.text())
def test_roundtrip_arbitrary_text(bpe, merges, s):
    tok = bpe(merges, {"<|endoftext|>": 356})
    ids = tok.encode(s, allowed_special="none")
    assert tok.decode(ids) == s
    assert ids == reference.Encoder(merges).encode_ordinary(s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_roundtrip_with_specials(bpe, merges, s):
    tok = bpe(merges, {"<|endoftext|>": 356})
    text = s + "<|endoftext|>" + s[::-1]
    ids = tok.encode(text, allowed_special="all")
    assert ids.count(356) >= 1
    assert tok.decode(ids) == text
