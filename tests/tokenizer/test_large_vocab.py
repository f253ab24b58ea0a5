"""Large vocabularies: 50,000 ids on the shared books (past the 46,341 where 32-bit pair
keys overflow) and 100,000 ids on generated words (ids past 16 bits)."""

from __future__ import annotations

import random

import pytest
from alilama_bpe import reference


@pytest.fixture(scope="module")
def books(data_dir):
    return [p.read_text(encoding="utf-8") for p in sorted((data_dir / "gutenberg").glob("*.txt"))]


@pytest.fixture(scope="module")
def expected_merges(books):
    # The pure-Python incremental trainer, itself checked against the naive reference
    # and the minbpe equivalent in test_reference_minbpe.py.
    return reference.train_incremental(reference.count_chunks(books), 50_000 - 256)


@pytest.mark.slow
def test_vocab_50k_on_books(bpe, books, expected_merges):
    tok = bpe.train(books, 50_000)
    assert len(tok.merges) == 50_000 - 256 and tok.vocab_size == 50_000
    assert tok.merges == expected_merges
    all_ids = tok.encode_batch(books, threads=2)
    assert max(max(ids) for ids in all_ids) > 46_341
    assert [tok.decode(ids) for ids in all_ids] == books
    sample = books[3][:300_000]
    assert tok.encode(sample) == reference.Encoder(tok.merges).encode_ordinary(sample)


@pytest.fixture(scope="module")
def many_words() -> str:
    # 60,000 random lower-case words, 400,000 draws: enough distinct pairs for 100,000 ids.
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(4, 12))) for _ in range(60_000)]
    return " ".join(rng.choice(words) for _ in range(400_000))


@pytest.mark.slow
def test_vocab_100k(bpe, many_words, tmp_path):
    if bpe.backend == "python":
        pytest.skip("the pure-Python trainer is the reference here; runs once, under [native]")
    tok = bpe.train([many_words], 100_000, special_tokens=["<|endoftext|>"])
    assert tok.vocab_size == 100_000 and tok.eot_id == 99_999
    assert tok.merges == reference.train_incremental(reference.count_chunks([many_words]), 100_000 - 257)
    ids = tok.encode(many_words)
    assert max(ids) > 65_535
    assert ids == reference.Encoder(tok.merges).encode_ordinary(many_words)
    path = tmp_path / "words.txt"
    path.write_text(many_words[:200_000] + "<|endoftext|>", encoding="utf-8")
    arr = tok.encode_file(path)
    assert arr.dtype.name == "uint32"  # ids past 65,535 need 32 bits
    assert arr.tolist() == tok.encode(many_words[:200_000]) + [tok.eot_id]
