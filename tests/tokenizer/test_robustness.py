"""Bad and hostile input, concurrent writers, native failures, exports with id gaps."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from alilama_bpe import _backend, reference
from alilama_bpe.tokenizer import BPETokenizer

from alilama_core.base.errors import TokenizerError

REPO = Path(__file__).resolve().parents[2]
native = pytest.mark.skipif(_backend.native is None, reason=f"native BPE backend: {_backend.IMPORT_ERROR}")


def _run(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


@pytest.fixture(scope="module")
def small(stories) -> BPETokenizer:
    return BPETokenizer.train([stories[:60_000]], 400, special_tokens=["<|endoftext|>"])


# ---------------------------------------------------------------- crafted and damaged files


def _doubling_model(path: Path, lines: int = 40) -> Path:
    merges = ["97 97"] + [f"{256 + k} {256 + k}" for k in range(lines - 4)]
    path.write_text("minbpe v1\n" + reference.GPT4_SPLIT_PATTERN + "\n0\n" + "\n".join(merges) + "\n")
    return path


@pytest.mark.parametrize("backend", ["native", "python"])
def test_crafted_model_with_ever_longer_tokens_is_refused_in_bounded_memory(tmp_path, backend):
    if backend == "native" and _backend.native is None:
        pytest.skip(f"native BPE backend: {_backend.IMPORT_ERROR}")
    path = _doubling_model(tmp_path / "evil.model")
    assert len(path.read_text().splitlines()) == 40
    out = _run(
        """
        import resource, sys, time
        from alilama_bpe.tokenizer import BPETokenizer
        from alilama_core.base.errors import TokenizerError
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        try:
            BPETokenizer.load(sys.argv[1], backend=sys.argv[2])
            print("loaded")
        except TokenizerError as e:
            print("refused", time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
            print(e)
        """,
        str(path),
        backend,
    )
    assert out.returncode == 0, out.stderr
    verdict, message = out.stdout.splitlines()[:2]
    assert verdict.startswith("refused")
    grown_kib = float(verdict.split()[2])
    assert grown_kib < 100 * 1024
    assert "evil.model" in message and "4096 bytes" in message and "line 16" in message


def test_limits_agree_between_backends():
    if _backend.native is None:
        pytest.skip(f"native BPE backend: {_backend.IMPORT_ERROR}")
    assert _backend.native.max_token_bytes == reference.MAX_TOKEN_BYTES
    assert _backend.native.max_vocab_bytes == reference.MAX_VOCAB_BYTES
    merges = [(97, 97)] + [(256 + k, 256 + k) for k in range(12)]  # 8192 bytes at the end
    with pytest.raises(TokenizerError, match="limited to 4096 bytes"):
        BPETokenizer(merges)
    with pytest.raises(ValueError, match="limited to 4096"):
        _backend.native.Encoder(merges, [])


def test_training_never_learns_a_token_over_the_limit(bpe):
    text = "a" * 20_000 + " b"
    with pytest.warns(UserWarning, match="allows only 16 merges"):  # 2, 4, ..., 4096 bytes, then 3 sums
        tok = bpe.train([text], 256 + 30)
    assert max(len(v) for v in tok.vocab.values()) <= reference.MAX_TOKEN_BYTES
    counts = reference.count_chunks([text])
    assert tok.merges == reference.train(counts, 30) == reference.train_incremental(counts, 30)


def test_truncated_model_is_refused_naming_the_file(tmp_path, bpe, small):
    tok = bpe(small.merges, small.special_tokens)
    tok.save(tmp_path / "tok")
    model = tmp_path / "tok" / "tokenizer.model"
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2 - 3])  # cut in the middle of a merge line
    with pytest.raises(TokenizerError, match=r"tokenizer\.model does not match tokenizer_config\.json") as e:
        bpe.load(tmp_path / "tok")
    assert str(model) in str(e.value) and "middle of a line" in str(e.value)


def test_edited_model_is_refused_by_its_hash(tmp_path, bpe, small):
    tok = bpe(small.merges, small.special_tokens)
    tok.save(tmp_path / "tok")
    model = tmp_path / "tok" / "tokenizer.model"
    lines = model.read_text().splitlines()
    lines[-1], lines[-2] = lines[-2], lines[-1]  # same count, different meaning
    model.write_text("\n".join(lines) + "\n")
    with pytest.raises(TokenizerError, match="SHA-256 differs"):
        bpe.load(tmp_path / "tok")


def test_folder_saved_without_a_hash_still_loads_and_is_still_checked(tmp_path, bpe, small):
    tok = bpe(small.merges, small.special_tokens)
    tok.save(tmp_path / "tok")
    config_path = tmp_path / "tok" / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    del config["model_sha256"]  # as written by older versions
    config_path.write_text(json.dumps(config))
    assert bpe.load(tmp_path / "tok").merges == tok.merges
    model = tmp_path / "tok" / "tokenizer.model"
    model.write_text("".join(model.read_text().splitlines(keepends=True)[:-10]))
    n = len(tok.merges)
    with pytest.raises(TokenizerError, match=rf"{n - 10} merges, the config records {n}"):
        bpe.load(tmp_path / "tok")


def test_save_over_a_file_is_a_clear_error(tmp_path, small):
    (tmp_path / "tok").write_text("not a folder")
    with pytest.raises(TokenizerError, match="it is a file, not a folder"):
        small.save(tmp_path / "tok")


# ---------------------------------------------------------------- writers


def test_resaving_swaps_the_folder_and_keeps_foreign_files(tmp_path, small):
    out = tmp_path / "tok"
    small.save(out)
    small.save_hf(out)
    other = BPETokenizer(small.merges[:100], {"<|endoftext|>": 356})
    other.save(out)  # only Alilama's files there: swapped whole, tokenizer.json rewritten
    assert BPETokenizer.load(out).merges == other.merges
    assert json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]["<|endoftext|>"] == 356
    (out / "notes.txt").write_text("mine")
    small.save(out)  # a user's file there: files replaced one by one, the note kept
    assert (out / "notes.txt").read_text() == "mine"
    assert BPETokenizer.load(out).merges == small.merges
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".old"))]
    assert leftovers == []


def test_save_while_another_process_writes_names_its_pid(tmp_path, small):
    out = tmp_path / "tok"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
            import sys, time
            from alilama_core.base.files import exclusive_lock
            with exclusive_lock(sys.argv[1], what="tokenizer folder"):
                print("locked", flush=True)
                time.sleep(30)
            """
            ),
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(TokenizerError, match=rf"being written by another process \(PID {holder.pid}\)"):
            small.save(out)
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()


def test_concurrent_saves_never_mix_files(tmp_path, small):
    out = tmp_path / "tok"
    code = """
        import sys
        from alilama_bpe.tokenizer import BPETokenizer
        from alilama_core.base.errors import TokenizerError
        src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
        tok = BPETokenizer.load(src)
        tok = BPETokenizer(tok.merges[:n], {"<|endoftext|>": 256 + n})
        busy = 0
        for _ in range(25):
            try:
                tok.save(out)
            except TokenizerError as e:
                assert "another process" in str(e), e
                busy += 1
        print(busy)
        """
    small.save(tmp_path / "src")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(tmp_path / "src"), str(out), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for n in (50, 120)
    ]
    for p in procs:
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
    loaded = BPETokenizer.load(out)  # the files agree with each other (hash, counts)
    assert len(loaded.merges) in (50, 120)
    assert loaded.merges == small.merges[: len(loaded.merges)]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".old"))]


# ---------------------------------------------------------------- native failures and GC


@native
@pytest.mark.parametrize("enabled", [True, False])
def test_encode_batch_leaves_the_gc_as_found(small, stories, enabled):
    docs = stories.split("<|endoftext|>")
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        small.encode_batch(docs, threads=2)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@native
def test_encode_batch_keeps_another_threads_gc_setting(small, stories):
    docs = stories.split("<|endoftext|>") * 8
    was = gc.isenabled()
    gc.enable()
    started = threading.Event()

    def other():
        started.wait()
        gc.disable()  # while the batch runs (its GIL-free part)

    t = threading.Thread(target=other)
    t.start()
    try:
        started.set()
        small.encode_batch(docs, threads=2)
        t.join()
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


@native
def test_failures_in_worker_threads_come_back_as_python_errors(tmp_path, small):
    # Under a tight address-space limit, starting threads and growing buffers fail in
    # the workers; the process must get an exception (or finish), never abort.
    small.save(tmp_path / "tok")
    out = _run(
        """
        import resource, sys
        from alilama_bpe.tokenizer import BPETokenizer
        from alilama_core.base.errors import TokenizerError
        tok = BPETokenizer.load(sys.argv[1])
        text = "Once upon a time there was a little dog.\\n" * 2_000_000
        size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + (96 << 20), resource.RLIM_INFINITY))
        results = []
        for call in (lambda: tok.encode(text), lambda: tok.encode_batch([text] * 4, threads=8),
                     lambda: tok._enc.encode_to_array(text, [], 8)):
            try:
                call()
                results.append("ok")
            except (TokenizerError, MemoryError) as e:
                results.append(type(e).__name__)
        print(" ".join(results))
        """,
        str(tmp_path / "tok"),
    )
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    results = out.stdout.split()
    assert len(results) == 3 and "TokenizerError" in results  # the limit was felt, and reported


# ---------------------------------------------------------------- Hugging Face export


@pytest.mark.parametrize(
    "specials", [{"<|endoftext|>": 300}, {"<|endoftext|>": 310, "<|pad|>": 400}, {"<|pad|>": 298, "<|endoftext|>": 299}]
)
def test_hf_export_keeps_special_ids_with_gaps(tmp_path, stories, specials):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    base = BPETokenizer.train([stories[:60_000]], 298)
    tok = BPETokenizer(base.merges, specials)
    tok.save(tmp_path)
    tok.save_hf(tmp_path)
    text = (
        "Once upon a time<|endoftext|> a cat<|pad|> sat.<|endoftext|>"
        if "<|pad|>" in specials
        else "Once upon a time<|endoftext|> a cat sat.<|endoftext|>"
    )
    ours = tok.encode(text, allowed_special="all")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert hf.encode(text).ids == ours
    assert hf.decode(ours, skip_special_tokens=False) == tok.decode(ours) == text
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert auto(text)["input_ids"] == ours
    assert auto.decode(ours) == text
    assert auto.eos_token == "<|endoftext|>" and auto.eos_token_id == specials["<|endoftext|>"]
    assert auto.pad_token_id == specials.get("<|pad|>", specials["<|endoftext|>"])


def test_absurd_vocab_size_is_a_clear_error(bpe):
    with pytest.raises(TokenizerError, match="vocab_size must be at most 16,777,216"):
        bpe.train(["hello world"], 10**10)
