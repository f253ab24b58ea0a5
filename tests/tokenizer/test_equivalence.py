"""The native code and the pure-Python reference agree token for token."""

from __future__ import annotations

import pytest
from alilama_bpe.tokenizer import BPETokenizer


def test_train_native_equals_reference_with_specials(stories, impl):
    if impl == "python":
        pytest.skip("compares the two implementations; runs once, under [native]")
    text = stories[:150_000]
    kw = dict(special_tokens=["<|endoftext|>"])
    native = BPETokenizer.train([text], 256 + 200 + 1, backend="native", **kw)
    python = BPETokenizer.train([text], 256 + 200 + 1, backend="python", **kw)
    assert native.merges == python.merges
    assert native.special_tokens == python.special_tokens == {"<|endoftext|>": 456}
    sample = stories[150_000:260_000]
    assert native.encode(sample, allowed_special="all") == python.encode(sample, allowed_special="all")
    assert native.encode(sample, allowed_special="none") == python.encode(sample, allowed_special="none")


def test_threads_do_not_change_results(bpe, stories):
    text = stories[:200_000]
    docs = text.split("<|endoftext|>")
    one = bpe.train(docs, 400, threads=1)
    two = bpe.train(docs, 400, threads=2)
    assert one.merges == two.merges
    assert one.encode_batch(docs, threads=1) == two.encode_batch(docs, threads=2)
    assert one.encode_batch(docs, threads=2) == [one.encode(d) for d in docs]


@pytest.mark.parametrize("threads", [1, 2])
def test_encode_batch_lists_are_ordinary_python_objects(bpe, stories, threads):
    # The native batch path fills the lists without the GIL and counts the references
    # afterwards: every int must hold exactly one reference per use, and the lists must
    # be tracked by the cyclic GC like any other list once the call returns.
    import gc
    import sys
    from collections import Counter

    docs = stories[:120_000].split("<|endoftext|>") + ["", "x"]
    tok = bpe.train(docs, 400)
    ids = tok.encode_batch(docs, threads=threads)
    assert ids == [tok.encode(d) for d in docs]
    assert gc.is_tracked(ids) and all(gc.is_tracked(x) for x in ids)
    counts = Counter(v for x in ids for v in x if v >= 256)
    probe = counts.most_common(1)[0][0]
    one = next(v for x in ids for v in x if v == probe)  # an int object in the result
    uses = sum(v is one for x in ids for v in x)  # all of them when the ints are shared
    before = sys.getrefcount(one)
    del ids
    assert sys.getrefcount(one) == before - uses
    again = tok.encode_batch(docs, threads=threads)
    assert sys.getrefcount(one) == before - uses + sum(v is one for x in again for v in x)


def test_special_tokens_are_boundaries_in_training(bpe):
    # "xy" only ever appears across a separator: it must never be learned.
    text = "ab x<|endoftext|>y ab " * 20
    tok = bpe.train([text], 256 + 3 + 1, special_tokens=["<|endoftext|>"])
    vocab = tok.vocab
    assert all(b"x" + b"y" not in vocab[256 + i] for i in range(len(tok.merges)))
    assert all(b"<|" not in vocab[256 + i] for i in range(len(tok.merges)))


def test_vocab_size_counts_bytes_merges_and_specials(bpe, stories):
    tok = bpe.train([stories[:50_000]], 300, special_tokens=["<|endoftext|>", "<|pad|>"])
    assert len(tok.merges) == 300 - 256 - 2
    assert tok.vocab_size == 300
    assert tok.special_tokens == {"<|endoftext|>": 298, "<|pad|>": 299}
    assert tok.eot_id == 298


def test_encode_large_text_in_threads_equals_one_thread(bpe, stories):
    tok = bpe.train([stories[:100_000]], 500, special_tokens=["<|endoftext|>"])
    ids = tok.encode(stories, allowed_special="all")
    assert tok.decode(ids) == stories
    if bpe.backend == "native":
        arr = tok._enc.encode_to_array(stories, ["<|endoftext|>"], 2)
        assert arr.tolist() == ids


def test_encode_file_equals_encode(bpe, stories, tmp_path):
    tok = bpe.train([stories[:100_000]], 600, special_tokens=["<|endoftext|>"])
    path = tmp_path / "s.txt"
    path.write_text(stories * 3, encoding="utf-8")
    arr = tok.encode_file(path, threads=2)
    assert str(arr.dtype) == "uint16"
    assert arr.tolist() == tok.encode(stories * 3, allowed_special="all")
    assert (arr == tok.eot_id).sum() == stories.count("<|endoftext|>") * 3


def test_encode_file_uint32_for_large_vocab(bpe, tmp_path):
    tok = BPETokenizer([], {"<|endoftext|>": 70_000}, backend=bpe.backend)
    path = tmp_path / "a.txt"
    path.write_text("hi<|endoftext|>there", encoding="utf-8")
    arr = tok.encode_file(path)
    assert str(arr.dtype) == "uint32"
    assert arr.tolist() == [104, 105, 70_000, 116, 104, 101, 114, 101]


def test_long_chunks_use_the_same_merges(bpe):
    # Chunks longer than the short-chunk path (whitespace runs, long words).
    text = ("a" * 500 + " " + "ab" * 300 + " " + " " * 700 + "x\n") * 3
    tok = bpe.train([text], 256 + 40)
    from alilama_bpe import reference

    ref = reference.Encoder(tok.merges)
    assert tok.encode(text) == ref.encode_ordinary(text)


@pytest.mark.slow  # files larger than a block, in both backends
def test_files_larger_than_a_block_stream_correctly(bpe, stories, tmp_path):
    # 17 MB > the 16 MiB read block: cuts between blocks must not change anything.
    text = stories * (17_000_000 // len(stories) + 1)
    path = tmp_path / "big.txt"
    path.write_text(text, encoding="utf-8")
    from_file = bpe.train_files([path], 700, special_tokens=["<|endoftext|>"])
    from_text = bpe.train([text], 700, special_tokens=["<|endoftext|>"])
    assert from_file.merges == from_text.merges
    arr = from_file.encode_file(path, threads=2)
    expected = from_text.encode_batch(text.split("<|endoftext|>"), threads=2)
    eot = from_file.eot_id
    joined = [i for k, ids in enumerate(expected) for i in ([eot] if k else []) + ids]
    assert arr.tolist() == joined


def test_training_leaves_no_utf8_copy_on_the_callers_str(bpe):
    # CPython caches a str's UTF-8 on first use, for the life of the str; training
    # reads non-ASCII text through a transient copy instead (memory follows the unique
    # chunks, not the corpus). sys.getsizeof counts the cached UTF-8.
    import sys

    texts = [f"café n°{i} — naïve façade, 東京 {i}\n" * 50 for i in range(40)]
    sizes = [sys.getsizeof(t) for t in texts]
    tok = bpe.train(texts, 300)
    assert [sys.getsizeof(t) for t in texts] == sizes
    assert tok.decode(tok.encode(texts[0])) == texts[0]


@pytest.mark.parametrize(
    "text",
    [" " * 40_000 + "x", "a" * 30_000, "ab" * 20_000 + " " + "aab" * 5_000, ("xy" * 3_000 + "\n") * 4],
    ids=["spaces", "one letter", "two letters", "lines"],
)
def test_pure_python_trainer_on_long_runs_gives_natives_merges(text):
    import warnings

    from alilama_bpe import _backend, reference

    counts = reference.count_chunks([text])
    merges = reference.train_incremental(counts, 40)
    assert merges == reference.train(counts, 40)
    if _backend.native is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert BPETokenizer.train([text], 256 + 40, backend="native").merges == merges


def test_an_absent_special_token_changes_nothing_but_ids(bpe, tmp_path, stories):
    path = tmp_path / "stories.txt"
    path.write_text(stories[:150_000], encoding="utf-8")
    one = bpe.train_files([path], 600, special_tokens=["<|endoftext|>"])
    two = bpe.train_files([path], 601, special_tokens=["<|endoftext|>", "<|pad|>"])
    assert one.merges == two.merges
    sample = stories[150_000:200_000]
    assert one.encode(sample, allowed_special="all") == two.encode(sample, allowed_special="all")
    assert list(one.encode_file(path)) == list(two.encode_file(path))


def test_special_tokens_found_wherever_they_are(bpe):
    # Many occurrences, partial prefixes of both tokens, tokens at both ends.
    merges = bpe.train(["some text to learn a few merges from"] * 3, 270).merges
    tok = bpe(merges, {"<|endoftext|>": 1000, "<|pad|>": 1001})
    parts = ["<|endoftext|>", "<|pad|>", "<|endof", "<|pa", "<", "<|", "x", " <|end", "|>"]
    import random

    rng = random.Random(5)
    for _ in range(300):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 30)))
        ids = tok.encode(text, allowed_special="all")
        assert tok.decode(ids) == text
        assert ids.count(1000) == text.count("<|endoftext|>") and ids.count(1001) == text.count("<|pad|>")
