"""Alilama's native BPE beside Hugging Face ``tokenizers`` and ``tiktoken``.

Same corpus, same split pattern (GPT-4's), same vocabulary, in one run:

* training at vocab 4096 and 8192: Alilama (native, all cores) against HF's
  ``BpeTrainer`` with a ``Split(regex)`` + ``ByteLevel`` pre-tokenizer; time, and
  the peak resident memory that one training call adds in a new process (see
  ``fresh_peak_mib``);
* encoding at vocab 8192 on 1 and 2 threads: Alilama's ``encode_batch`` against
  a ``tiktoken.Encoding`` built from the same merges (``encode_ordinary_batch``)
  and HF ``Tokenizer.encode_batch`` loaded from Alilama's ``tokenizer.json``
  (``TOKENIZERS_PARALLELISM`` toggles its second thread); the cyclic GC is off
  while timing, as ``timeit`` does.

The corpus is TinyStories (train, train_v1_lowercase, valid; never test) and the
Gutenberg books from ``../shared/data``, repeated to about 100 MB with
``ALILAMA_BENCH_FULL=1`` (about 1 MB otherwise), cut into documents at
``<|endoftext|>`` and, for long ones (books), at lines::

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_tokenizer.py --benchmark-only \\
        --benchmark-group-by=group --benchmark-columns=median,min,max,rounds \\
        --benchmark-json=/tmp/tokenizer-bench.json
    .venv/bin/python benchmarks/test_tokenizer.py /tmp/tokenizer-bench.json   # the docs table
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from alilama_bench import FULL, peak_memory_mib

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ALILAMA_DATA", REPO.parent / "shared" / "data"))
TARGET_BYTES = 100_000_000 if FULL else 1_000_000
TRAIN_VOCABS = [4096, 8192] if FULL else [1024, 2048]  # 1 MB allows only ~7k ids
ENCODE_VOCAB = 8192 if FULL else 2048
EOT = "<|endoftext|>"


def load_docs() -> list[str] | None:
    """The benchmark corpus as documents, or None when the shared data is missing."""
    files = [DATA / "tinystories" / n for n in ("train.txt", "train_v1_lowercase.txt", "valid.txt")]
    files += sorted((DATA / "gutenberg").glob("*.txt"))
    if not all(f.is_file() for f in files[:3]):
        return None
    pieces: list[str] = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        for doc in text.split(EOT):
            if len(doc) > 65_536:
                pieces.extend(doc.splitlines(keepends=True))
            elif doc:
                pieces.append(doc)
    out: list[str] = []
    size = 0
    while size < TARGET_BYTES:
        for p in pieces:
            out.append(p)
            size += len(p.encode("utf-8"))
            if size >= TARGET_BYTES:
                break
    return out


@pytest.fixture(scope="module")
def docs() -> list[str]:
    out = load_docs()
    if out is None:
        pytest.skip(f"shared data not found at {DATA} (set ALILAMA_DATA)")
    return out


@pytest.fixture(scope="module")
def nbytes(docs) -> int:
    return sum(len(d.encode("utf-8")) for d in docs)


def _hf_train(docs: list[str], vocab_size: int):
    from alilama_bpe.reference import GPT4_SPLIT_PATTERN
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GPT4_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer)
    return tok


def _alilama_train(docs: list[str], vocab_size: int):
    from alilama_bpe.tokenizer import BPETokenizer

    return BPETokenizer.train(docs, vocab_size, special_tokens=[EOT], threads=os.cpu_count())


TRAINERS = {"alilama": _alilama_train, "hf-tokenizers": _hf_train}


def fresh_peak_mib(impl: str, vocab_size: int) -> float:
    """Resident memory that one training call adds at its peak, measured in a new process.

    Measuring in the benchmark's own process would flatter whichever tool makes many
    small allocations: after a first call, glibc keeps the freed small blocks resident
    and the next call reuses them without raising the resident set. A new process
    loads the corpus, makes CPython's cached UTF-8 of every str (both tools read str
    through it, and neither should be charged for it), trains once on a few kilobytes
    (imports, thread pools), then trains on the corpus and reports that call.
    """
    out = subprocess.run(
        [sys.executable, __file__, "--peak", impl, str(vocab_size)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


def _peak_main(impl: str, vocab_size: int) -> None:
    import ctypes

    docs = load_docs()
    as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    as_utf8.restype, as_utf8.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_void_p]
    for d in docs:
        as_utf8(d, None)
    fn = TRAINERS[impl]
    fn(docs[:20], 300)
    print(peak_memory_mib(lambda: fn(docs, vocab_size)))


@pytest.mark.parametrize("vocab_size", TRAIN_VOCABS)
@pytest.mark.parametrize("impl", ["alilama", "hf-tokenizers"])
def test_train(benchmark, docs, nbytes, impl, vocab_size):
    pytest.importorskip("tokenizers")
    fn = TRAINERS[impl]
    benchmark.group = f"train vocab {vocab_size}"
    rounds = 1 if (FULL and impl != "alilama") else 5
    tok = benchmark.pedantic(fn, args=(docs, vocab_size), rounds=rounds, iterations=1)
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["peak_mib"] = round(fresh_peak_mib(impl, vocab_size), 1)
    size = tok.vocab_size if impl == "alilama" else tok.get_vocab_size()
    assert size == vocab_size


@pytest.fixture(scope="module")
def trained(docs):
    return _alilama_train(docs, ENCODE_VOCAB)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("impl", ["alilama", "tiktoken", "hf-tokenizers"])
def test_encode(benchmark, docs, nbytes, trained, impl, threads, tmp_path):
    benchmark.group = f"encode vocab {ENCODE_VOCAB}, {threads} thread{'s' if threads > 1 else ''}"
    if impl == "alilama":
        fn = lambda: trained.encode_batch(docs, threads=threads)  # noqa: E731
    elif impl == "tiktoken":
        pytest.importorskip("tiktoken")
        enc = trained.to_tiktoken()
        if threads == 1:
            fn = lambda: [enc.encode_ordinary(d) for d in docs]  # noqa: E731
        else:
            fn = lambda: enc.encode_ordinary_batch(docs, num_threads=threads)  # noqa: E731
    else:
        tokenizers = pytest.importorskip("tokenizers")
        hf = tokenizers.Tokenizer.from_file(str(trained.save_hf(tmp_path)))
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"

        def fn():
            return [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]

    # As timeit does: the cyclic GC is off while timing, and the previous round's
    # lists are collected before each round, for every tool alike (otherwise a
    # collection triggered by one call walks the lists the previous call made).
    def quiet_gc():
        gc.collect()
        gc.disable()

    rounds = 1 if (FULL and impl != "alilama") else 7
    try:
        ids = benchmark.pedantic(fn, setup=quiet_gc, rounds=rounds, iterations=1)
    finally:
        gc.enable()
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["tokens"] = sum(len(x) for x in ids)
    sample = slice(0, 2000)
    assert ids[sample] == trained.encode_batch(docs[sample], threads=1)


# Special tokens: one registered, or two with the second absent from the text (a lookup
# for each must not rescan the text: both rows should take the same time).
SPECIAL_SETS = {"one": [EOT], "two, one absent": [EOT, "<|pad|>"]}


@pytest.fixture(scope="module")
def corpus_file(docs, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(d)
            f.write(EOT + "\n")
    return path


@pytest.mark.parametrize("specials", list(SPECIAL_SETS))
@pytest.mark.parametrize("op", ["encode_file", "train_files"])
def test_special_tokens(benchmark, trained, corpus_file, op, specials):
    from alilama_bpe.tokenizer import BPETokenizer

    tokens = SPECIAL_SETS[specials]
    benchmark.group = f"special tokens, {op}"
    benchmark.extra_info["bytes"] = corpus_file.stat().st_size
    if op == "encode_file":
        n = 256 + len(trained.merges)
        tok = BPETokenizer(trained.merges, {t: n + k for k, t in enumerate(tokens)})
        ids = benchmark.pedantic(lambda: tok.encode_file(corpus_file), rounds=5, iterations=1)
        assert int((ids == n).sum()) > 0 and int((ids == n + 1).sum()) == 0
    else:

        def fn():
            return BPETokenizer.train_files([corpus_file], ENCODE_VOCAB, special_tokens=tokens)

        tok = benchmark.pedantic(fn, rounds=3, iterations=1)
        assert tok.vocab_size == ENCODE_VOCAB


@pytest.mark.parametrize("run", [40_000, 80_000])
def test_python_trainer_long_run(benchmark, run):
    """The pure-Python trainer on one run of spaces: time grows with the run's length, not its square."""
    import warnings

    from alilama_bpe.tokenizer import BPETokenizer

    benchmark.group = "pure-Python training, one run of spaces"
    benchmark.extra_info["bytes"] = run

    def fn():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the run allows fewer merges than asked
            return BPETokenizer.train([" " * run + "x"], 300, backend="python")

    tok = benchmark.pedantic(fn, rounds=3, iterations=1)
    assert tok.merges[0] == (32, 32)


def table(json_path: str) -> str:
    """Markdown table (medians, MB/s, ratios to the peers) from ``--benchmark-json`` output."""
    import json

    runs = json.loads(Path(json_path).read_text())["benchmarks"]
    rows = ["| group | tool | median s | MB/s | peak MiB | vs alilama |", "|---|---|---:|---:|---:|---:|"]
    by_group: dict[str, list[dict]] = {}
    for r in runs:
        by_group.setdefault(r["group"], []).append(r)
    for group in sorted(by_group):
        entries = by_group[group]
        ours = next((e for e in entries if _label(e) == "alilama"), None)
        for e in sorted(entries, key=lambda e: e["stats"]["median"]):
            med = e["stats"]["median"]
            mbs = e["extra_info"]["bytes"] / 1e6 / med
            peak = e["extra_info"].get("peak_mib", "")
            ratio = f"{med / ours['stats']['median']:.1f}× slower" if ours and e is not ours else ""
            rows.append(f"| {group} | {_label(e)} | {med:.3f} | {mbs:.1f} | {peak} | {ratio} |")
    # The ratios: training time and peak memory against HF, encoding per thread
    # against tiktoken, and Alilama's gain from a second thread.
    med = {(g, _label(e)): e for g, es in by_group.items() for e in es}
    notes = []
    for group in sorted(g for g in by_group if g.startswith("train")):
        ours, hf = med.get((group, "alilama")), med.get((group, "hf-tokenizers"))
        if ours and hf:
            speed = hf["stats"]["median"] / ours["stats"]["median"]
            mem = ours["extra_info"]["peak_mib"] / hf["extra_info"]["peak_mib"]
            notes.append(f"* {group}: {speed:.1f}× faster than HF tokenizers, {mem:.2f}× its peak memory")
    for group in sorted(g for g in by_group if g.startswith("special tokens")):
        one, two = med.get((group, "one")), med.get((group, "two, one absent"))
        if one and two:
            ratio = two["stats"]["median"] / one["stats"]["median"]
            notes.append(f"* {group}: two special tokens (one absent) take {ratio:.2f}× the time of one")
    one = [g for g in by_group if g.startswith("encode") and g.endswith("1 thread")]
    two = [g for g in by_group if g.startswith("encode") and g.endswith("2 threads")]
    if one and (one[0], "alilama") in med and (one[0], "tiktoken") in med:
        ratio = med[(one[0], "tiktoken")]["stats"]["median"] / med[(one[0], "alilama")]["stats"]["median"]
        notes.append(f"* encoding on 1 thread: {ratio:.1f}× tiktoken's throughput")
    if one and two and (one[0], "alilama") in med and (two[0], "alilama") in med:
        gain = med[(one[0], "alilama")]["stats"]["median"] / med[(two[0], "alilama")]["stats"]["median"]
        notes.append(f"* encoding: 2 threads give {gain:.2f}× the throughput of 1")
    return "\n".join(rows + [""] + notes)


def _label(entry: dict) -> str:
    """The row's tool (or, for the special-token and long-run rows, its case)."""
    params = entry["params"]
    return str(params.get("impl") or params.get("specials") or f"run of {params.get('run')}")


if __name__ == "__main__":
    if sys.argv[1] == "--peak":  # one measurement for fresh_peak_mib
        _peak_main(sys.argv[2], int(sys.argv[3]))
    else:
        print(table(sys.argv[1]))
