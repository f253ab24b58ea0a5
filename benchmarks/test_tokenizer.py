"""Alilama's native BPE beside Hugging Face ``tokenizers`` and ``tiktoken``.

Same corpus, same split pattern (GPT-4's), same vocabulary, in one run:

* training at vocab 4096 and 8192: Alilama (native, all cores) against HF's
  ``BpeTrainer`` with a ``Split(regex)`` + ``ByteLevel`` pre-tokenizer; time and
  peak resident memory added by the call;
* encoding at vocab 8192 on 1 and 2 threads: Alilama's ``encode_batch`` against
  a ``tiktoken.Encoding`` built from the same merges (``encode_ordinary_batch``)
  and HF ``Tokenizer.encode_batch`` loaded from Alilama's ``tokenizer.json``
  (``TOKENIZERS_PARALLELISM`` toggles its second thread).

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

import os
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


@pytest.fixture(scope="module")
def docs() -> list[str]:
    files = [DATA / "tinystories" / n for n in ("train.txt", "train_v1_lowercase.txt", "valid.txt")]
    files += sorted((DATA / "gutenberg").glob("*.txt"))
    if not all(f.is_file() for f in files[:3]):
        pytest.skip(f"shared data not found at {DATA} (set ALILAMA_DATA)")
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
def nbytes(docs) -> int:
    return sum(len(d.encode("utf-8")) for d in docs)


def _hf_train(docs: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    from alilama_bpe.reference import GPT4_SPLIT_PATTERN

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


@pytest.mark.parametrize("vocab_size", TRAIN_VOCABS)
@pytest.mark.parametrize("impl", ["alilama", "hf-tokenizers"])
def test_train(benchmark, docs, nbytes, impl, vocab_size):
    pytest.importorskip("tokenizers")
    fn = _alilama_train if impl == "alilama" else _hf_train
    benchmark.group = f"train vocab {vocab_size}"
    rounds = 1 if (FULL and impl != "alilama") else 3
    tok = benchmark.pedantic(fn, args=(docs, vocab_size), rounds=rounds, iterations=1)
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["peak_mib"] = round(peak_memory_mib(lambda: fn(docs, vocab_size)), 1)
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

    rounds = 1 if (FULL and impl != "alilama") else 3
    ids = benchmark.pedantic(fn, rounds=rounds, iterations=1)
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["tokens"] = sum(len(x) for x in ids)
    sample = slice(0, 2000)
    assert ids[sample] == trained.encode_batch(docs[sample], threads=1)


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
        ours = next((e for e in entries if e["params"]["impl"] == "alilama"), None)
        for e in sorted(entries, key=lambda e: e["stats"]["median"]):
            med = e["stats"]["median"]
            mbs = e["extra_info"]["bytes"] / 1e6 / med
            peak = e["extra_info"].get("peak_mib", "")
            ratio = f"{med / ours['stats']['median']:.1f}× slower" if ours and e is not ours else ""
            rows.append(f"| {group} | {e['params']['impl']} | {med:.3f} | {mbs:.1f} | {peak} | {ratio} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(sys.argv[1]))
