"""A 50,000-id vocabulary on the shared books (past the 46,341 where 32-bit pair keys overflow)."""

from __future__ import annotations

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
