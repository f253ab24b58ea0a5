"""HF tokenizers and tiktoken give Alilama's ids (built from the same merges)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def trained(bpe, stories, book):
    return bpe.train([stories[:200_000], book[:100_000]], 1000, special_tokens=["<|endoftext|>"])


def test_hf_tokenizers_gives_the_same_ids(trained, stories, book, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    path = trained.save_hf(tmp_path)
    hf = tokenizers.Tokenizer.from_file(str(path))
    for text in [stories[200_000:260_000], book[100_000:160_000], "Hi!! <|endoftext|> x  \n\n 123456 I'M"]:
        ids = trained.encode(text, allowed_special="all")
        assert hf.encode(text).ids == ids
        assert hf.decode(ids, skip_special_tokens=False) == text
    vocab = json.loads(path.read_text())["model"]["vocab"]
    assert vocab["Ġ"] == 32 and vocab["a"] == 97  # ids 0..255 stay the byte values


def test_hf_transformers_fast_tokenizer(trained, stories, tmp_path):
    transformers = pytest.importorskip("transformers")
    trained.save_hf(tmp_path)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    text = stories[300_000:310_000]
    assert fast(text)["input_ids"] == trained.encode(text, allowed_special="all")


def test_tiktoken_gives_the_same_ids(trained, stories, book):
    pytest.importorskip("tiktoken")
    enc = trained.to_tiktoken()
    for text in [stories[200_000:300_000], book[100_000:200_000]]:
        ids = trained.encode(text, allowed_special="all")
        assert enc.encode(text, allowed_special="all") == ids
        assert enc.decode(ids) == text
    assert enc.n_vocab == trained.vocab_size
