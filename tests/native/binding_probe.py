"""Run every entry point of a build of ``alilama_bpe._native`` over a varied corpus; pickle the results.

    python tests/native/binding_probe.py PATH/TO/_native.cpython-*.so OUT.pickle

Used by ``test_binding_fallback.py``, once for the installed module (built with
``ALILAMA_CPYTHON_FASTPATH`` on) and once for the fallback (public C API) build, each
in its own process: two pybind11 modules that register the same C++ classes cannot
be loaded into one interpreter. The results (ids, merges, decoded bytes, and the type
and message of every error) must be equal.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import pickle
import sys
import tempfile
from typing import Any, Callable

import numpy as np

SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|x|>"]


class Sub(str):
    """A str subclass: not a compact str, so read through the general path."""


def corpus() -> list[str]:
    base = [
        "",
        " ",
        "hello world",
        "Hello, World! It's 2026 and we're testing: don't, won't, I'll, you've.",
        "tabs\tand\nnewlines\r\n\r\n  trailing   spaces   ",
        "numbers 1 12 123 1234 12345 3.14159 -42 1e10",
        "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
        "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\uff0c\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0639\u0631\u0628\u064a \u0939\u093f\u0928\u094d\u0926\u0940",
        "emoji \U0001f600\U0001f680 family \U0001f468\u200d\U0001f469\u200d\U0001f467 flag \U0001f1eb\U0001f1f7 \u2764\ufe0f",
        "combining e\u0301 a\u0308 \u0915\u094d\u0937 zero\u200bwidth",
        "special <|endoftext|> inside and <|fim_prefix|>x<|x|> and <|endoftext|><|endoftext|>",
        "almost special <|endoftext| <|end <|x",
        "\U0010ffff\U00010000 \x00\x01\x7f controls",
        "a" * 5000,
        ("The quick brown fox jumps over the lazy dog. " * 2000) + "\u00e9\U0001f600",
        "".join(chr(c) for c in range(32, 0x3000, 7)),
    ]
    # many documents, mixed lengths and scripts
    many = [f"doc {i}: " + base[i % len(base)][: (i * 37) % 300] + (" \u00e9" * (i % 5)) for i in range(3000)]
    return base + many + [Sub("a str subclass \u00e9 <|x|>"), Sub("ascii subclass")]


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        value = fn()
    except Exception as e:  # the type and message are part of the result
        return ("error", type(e).__name__, str(e))
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.tolist())
    return value


def main(so: str, out_path: str) -> None:
    spec = importlib.util.spec_from_file_location("_native", so)
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    res: dict[str, Any] = {"fastpath": bool(getattr(native, "cpython_fastpath", None))}
    texts = corpus()
    here = os.getcwd()
    bad = ["lone \ud800 surrogate", "a\udfffb", "\ud83d\ude00 split pair"]

    res["split"] = [outcome(lambda t=t: native.split(t)) for t in texts[:20] + bad]
    res["split_bytes"] = [
        outcome(lambda t=t: native.split(t.encode("utf-8", "surrogatepass"))) for t in texts[:20] + bad
    ]

    # Training: fresh str (no cached UTF-8), lists, bytes and a file; progress reports recorded.
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)  # relative paths: error messages that name a file are the same in both runs
        path = "corpus.txt"
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(texts[:20]))
        trainer = native.Trainer(SPECIALS, threads=2)
        trainer.add(texts)
        trainer.add_bytes("bytes added \u00e9 <|x|>".encode())
        reads: list[tuple[int, int]] = []
        trainer.add_file(path, "strict", lambda done, total: reads.append((done, total)))
        res["trainer_counts"] = (trainer.unique_chunks, trainer.total_bytes, trainer.total_chunks, reads)
        reports: list[tuple[int, int]] = []
        merges = trainer.train(400, lambda done, total: reports.append((done, total)))
        res["merges"] = merges
        res["train_reports"] = reports
        res["add_bad"] = outcome(lambda: native.Trainer([], threads=1).add(["ok", bad[0]]))
        res["add_nonstr"] = outcome(lambda: native.Trainer([], threads=1).add(["ok", 3]))

        def raising(done: int, total: int) -> None:
            raise KeyError(f"stop at {done}/{total}")

        t2 = native.Trainer([], threads=1)
        t2.add(texts[:50])
        res["train_progress_raises"] = outcome(lambda: t2.train(50, raising))
        res["add_file_progress_raises"] = outcome(
            lambda: native.Trainer([], threads=1).add_file(path, "strict", raising)
        )
        res["add_file_missing"] = outcome(
            lambda: native.Trainer([], threads=1).add_file(path + ".nope", "strict", None)
        )
        bad_path = "bad.txt"
        with open(bad_path, "wb") as f:
            f.write(b"good text \xff\xfe bad")
        res["add_file_invalid"] = outcome(lambda: native.Trainer([], threads=1).add_file(bad_path, "strict", None))
        res["add_file_replace"] = outcome(lambda: native.Trainer([], threads=1).add_file(bad_path, "replace", None))

        specials = [(tok, 256 + len(merges) + i) for i, tok in enumerate(SPECIALS)]
        enc = native.Encoder(merges, specials)
        res["sizes"] = (enc.vocab_size, enc.num_merges)

        # Encoding: one text at a time, then in batches.
        allowed = [SPECIALS[0], SPECIALS[2]]
        res["encode"] = [outcome(lambda t=t: enc.encode(t, [], 1)) for t in texts[:40] + bad]
        res["encode_allowed"] = [outcome(lambda t=t: enc.encode(t, allowed, 2)) for t in texts[:40]]
        res["encode_bytes"] = [
            outcome(lambda t=t: enc.encode_bytes(t.encode("utf-8", "surrogatepass"))) for t in texts[:20] + bad
        ]
        res["encode_to_array"] = [outcome(lambda t=t: enc.encode_to_array(t, SPECIALS, 2)) for t in texts[:20]]
        for threads in (1, 2, 4):
            res[f"batch_{threads}"] = outcome(lambda: enc.encode_batch(texts, [], threads, []))
            res[f"batch_allowed_{threads}"] = outcome(lambda: enc.encode_batch(texts, SPECIALS, threads, []))
        res["batch_empty"] = outcome(lambda: enc.encode_batch([], [], 2, []))
        res["batch_empty_strs"] = outcome(lambda: enc.encode_batch([""] * 700, [], 2, []))
        one_special = ["plain"] * 600 + ["has <|fim_prefix|> here"] + ["plain"] * 600
        res["batch_disallowed"] = outcome(lambda: enc.encode_batch(one_special, [], 2, [SPECIALS[1]]))
        res["batch_disallowed_absent"] = outcome(lambda: enc.encode_batch(texts[:100], [], 2, [SPECIALS[1]]))
        res["batch_surrogate"] = outcome(lambda: enc.encode_batch(texts[:10] + [bad[0]], [], 2, []))
        res["batch_nonstr"] = outcome(lambda: enc.encode_batch(["a", b"b"], [], 2, []))
        res["batch_tuple"] = outcome(lambda: enc.encode_batch(tuple(texts[:30]), [], 2, []))

        # Decoding every list back, from lists and from arrays.
        ids = res["batch_allowed_2"]
        res["decode"] = [outcome(lambda x=x: enc.decode_bytes(x)) for x in ids]
        res["decode_array"] = [outcome(lambda x=x: enc.decode_bytes(np.asarray(x, dtype=np.int64))) for x in ids[:50]]
        res["decode_bad"] = [outcome(lambda x=x: enc.decode_bytes(x)) for x in ([-1], [10**9], [enc.vocab_size + 99])]
        res["roundtrip"] = all(enc.decode_bytes(x) == t.encode("utf-8") for x, t in zip(ids, texts))

        res["encode_file"] = outcome(lambda: enc.encode_file(path, 2, "strict", None))
        file_reports: list[tuple[int, int]] = []
        res["encode_file_progress"] = outcome(
            lambda: enc.encode_file(path, 1, "strict", lambda d, t: file_reports.append((d, t)))
        )
        res["encode_file_reports"] = file_reports
        res["encode_file_progress_raises"] = outcome(lambda: enc.encode_file(path, 1, "strict", raising))
        res["encode_file_invalid"] = outcome(lambda: enc.encode_file(bad_path, 1, "strict", None))
        res["encode_file_errors_arg"] = outcome(lambda: enc.encode_file(path, 1, "ignore", None))

        # Texts whose UTF-8 is now cached with the str (they went through encode): training on
        # them again gives the same merges.
        again = native.Trainer(SPECIALS, threads=2)
        again.add(texts)
        again.add_bytes("bytes added \u00e9 <|x|>".encode())
        again.add_file(path, "strict", None)
        res["merges_again_equal"] = again.train(400, None) == merges
        os.chdir(here)

    # Reference counts: many batches made and dropped leave the shared ints intact.
    sample = texts[:400]
    first = enc.encode_batch(sample, [], 2, [])
    probe = max((i for ids in first for i in ids), default=0)  # an int of the module's shared table
    probe = next(i for ids in first for i in ids if i == probe)
    before = sys.getrefcount(probe)
    for _ in range(30):
        lists = enc.encode_batch(sample, [], 2, [])
        del lists
    gc.collect()
    res["refcount_delta"] = sys.getrefcount(probe) - before
    res["batch_repeat_equal"] = enc.encode_batch(sample, [], 2, []) == first

    with open(out_path, "wb") as f:
        pickle.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
