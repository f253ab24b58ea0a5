"""``alilama data prepare``: text, JSONL, folders and HF datasets to token files; bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alilama_core.app.prepare import prepare, read_text_documents, read_text_pieces
from alilama_core.base.errors import AlilamaError, DataError
from alilama_core.runs.data import TokenData
from alilama_core.runs.tokenizers import load_tokenizer


def _decode_docs(data_dir, split):
    tok = load_tokenizer(data_dir / "tokenizer")
    ids = np.fromfile(data_dir / f"{split}.bin", dtype=np.uint16).tolist()
    docs, current = [], []
    for i in ids:
        if i == tok.eot_id:
            docs.append(tok.decode(current))
            current = []
        else:
            current.append(i)
    assert current == []  # every document ends with the end-of-text token
    return docs


def test_prepare_text_round_trips_every_document(corpus, data_dir):
    originals = list(read_text_documents(corpus))
    meta = json.loads((data_dir / "meta.json").read_text())
    train, val = _decode_docs(data_dir, "train"), _decode_docs(data_dir, "val")
    assert sorted(train + val) == sorted(originals)
    assert meta["splits"]["train"]["documents"] == len(train) and len(val) > 0
    assert meta["splits"]["train"]["bytes"] == sum(len(d.encode()) for d in train)
    assert meta["dtype"] == "uint16" and meta["eot_id"] == 319
    assert TokenData(data_dir).split("train").dtype == np.uint16


def test_prepare_jsonl_and_folders(tokenizer_dir, tmp_path):
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": f"Story number {i}. The cat sat."}) for i in range(30)) + "\n")
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(5):
        (folder / f"doc{i}.txt").write_text(f"A whole file is one document {i}.\nSecond line.\n")
    meta = prepare([str(jsonl), str(folder)], tokenizer_dir, tmp_path / "out", val_fraction=0.2, seed=3)
    total = meta["splits"]["train"]["documents"] + meta["splits"]["val"]["documents"]
    assert total == 35
    docs = _decode_docs(tmp_path / "out", "train") + _decode_docs(tmp_path / "out", "val")
    assert "A whole file is one document 3.\nSecond line." in docs
    assert "Story number 7. The cat sat." in docs


def test_prepare_local_hf_dataset(tokenizer_dir, tmp_path):
    datasets = pytest.importorskip("datasets", reason="the optional `datasets` package is not installed")
    ds = datasets.Dataset.from_dict({"text": [f"Hello from record {i}." for i in range(40)], "id": list(range(40))})
    ds.save_to_disk(str(tmp_path / "ds"))
    meta = prepare([f"hf:{tmp_path / 'ds'}"], tokenizer_dir, tmp_path / "out", val_fraction=0.25)
    docs = _decode_docs(tmp_path / "out", "train") + _decode_docs(tmp_path / "out", "val")
    assert sorted(docs) == sorted(f"Hello from record {i}." for i in range(40))
    with pytest.raises(DataError, match="no field 'body'"):
        prepare([f"hf:{tmp_path / 'ds'}"], tokenizer_dir, tmp_path / "out2", field="body")
    assert meta["sources"] == [f"hf:{tmp_path / 'ds'}"]


def test_bad_inputs_give_clear_errors_and_touch_nothing(tokenizer_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(DataError, match="the input is empty"):
        prepare([str(empty)], tokenizer_dir, tmp_path / "a")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("Caf\u00e9 ok\n".encode() + "na\u00efve".encode("latin-1") + b"\n")
    with pytest.raises(DataError, match=r"latin1.txt' is not valid UTF-8 at byte offset 11"):
        prepare([str(latin)], tokenizer_dir, tmp_path / "b")
    meta = prepare([str(latin)], tokenizer_dir, tmp_path / "c", errors="replace", val_fraction=0)
    assert meta["splits"]["train"]["documents"] == 1
    with pytest.raises(DataError, match="does not exist"):
        prepare([str(tmp_path / "missing.txt")], tokenizer_dir, tmp_path / "d")
    keep = tmp_path / "existing"
    keep.mkdir()
    (keep / "precious.txt").write_text("keep me")
    with pytest.raises(AlilamaError, match="holds other files"):
        prepare([str(latin)], tokenizer_dir, keep, errors="replace")
    with pytest.raises(AlilamaError, match="replaces only a data folder that Alilama wrote"):
        prepare([str(latin)], tokenizer_dir, keep, errors="replace", overwrite=True)
    assert (keep / "precious.txt").read_text() == "keep me"
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # no half-written output left


def test_tokenizer_mismatch_is_detected(data_dir, tmp_path):
    import shutil

    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    from alilama_core.engine.registry import get_tokenizer

    other = get_tokenizer("bpe").train(
        ["a different corpus, a different tokenizer"] * 5, 270, special_tokens=["<|endoftext|>"]
    )
    other.save(copy / "tokenizer")
    with pytest.raises(DataError, match="does not match the one the data was prepared with"):
        TokenData(copy)


def test_missing_data_folder(tmp_path):
    with pytest.raises(DataError, match="not a prepared data folder"):
        TokenData(tmp_path)


def test_download_uses_the_hub_cache_offline(tmp_path, monkeypatch):
    """The real hf_hub_download path against the Hub's cache layout, with HF_HUB_OFFLINE=1."""
    import subprocess
    import sys

    hub = tmp_path / "hf" / "hub"
    repo = hub / "datasets--roneneldan--TinyStories"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    blobs = repo / "blobs"
    blobs.mkdir()
    for name, text in [
        ("TinyStoriesV2-GPT4-train.txt", "Once.\n<|endoftext|>\n"),
        ("TinyStoriesV2-GPT4-valid.txt", "Twice.\n<|endoftext|>\n"),
    ]:
        blob = blobs / f"{abs(hash(name)):040x}"[:40]
        blob.write_text(text)
        (snapshot / name).symlink_to(f"../../blobs/{blob.name}")
    code = "from alilama_core.runs.datasets import download; print('\\n'.join(download('tinystories')))"
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    paths = out.stdout.split()
    assert [p.rsplit("/", 1)[1] for p in paths] == ["TinyStoriesV2-GPT4-train.txt", "TinyStoriesV2-GPT4-valid.txt"]
    assert open(paths[0]).read() == "Once.\n<|endoftext|>\n"
    (snapshot / "TinyStoriesV2-GPT4-valid.txt").unlink()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode != 0 and "not in the local Hugging Face cache" in out.stderr


def test_long_documents_are_read_in_pieces_that_encode_like_the_whole(tokenizer_dir, tmp_path):
    lines = [f"Line {i}: the cat sat, 'twas {i * 7} o'clock.\n" + ("\n" if i % 5 == 0 else "") for i in range(400)]
    lines[37] = "   indented lines are never a cut point\n"
    text = "\n\n" + "".join(lines) + "\n"
    path = tmp_path / "book.txt"
    path.write_text(text)
    pieces = list(read_text_pieces(path, piece_chars=500))
    assert len(pieces) > 10 and [last for _, last in pieces] == [False] * (len(pieces) - 1) + [True]
    assert "".join(p for p, _ in pieces) == text.strip("\n") == next(read_text_documents(path))
    assert all(p[0] not in " \n" for p, _ in pieces)  # each piece starts a line with a visible character
    tok = load_tokenizer(tokenizer_dir)
    whole = tok.encode(text.strip("\n"), allowed_special="none")
    assert [i for p, _ in pieces for i in tok.encode(p, allowed_special="none")] == whole


def test_a_given_validation_file_is_the_val_split(tokenizer_dir, corpus, tmp_path):
    """``--val-input``: every document of the input trains, every one of the given file validates."""
    docs = list(read_text_documents(corpus))
    valid = tmp_path / "valid.txt"
    valid.write_text("\n<|endoftext|>\n".join(docs[:3]) + "\n")
    meta = prepare([str(corpus)], tokenizer_dir, tmp_path / "out", val_inputs=[str(valid)])
    out = tmp_path / "out"
    assert meta["split"] == "given" and meta["val_fraction"] == 0.0 and meta["val_sources"] == [str(valid)]
    assert _decode_docs(out, "train") == docs and _decode_docs(out, "val") == docs[:3]
    with pytest.raises(DataError, match="give one of the two"):
        prepare([str(corpus)], tokenizer_dir, tmp_path / "x", val_fraction=0.1, val_inputs=[str(valid)])
    assert not (tmp_path / "x").exists()


def test_one_book_is_split_by_position(tokenizer_dir, corpus, tmp_path):
    book = tmp_path / "book.txt"
    book.write_text(corpus.read_text().replace("<|endoftext|>\n", ""))  # one document, no separators
    meta = prepare([str(book)], tokenizer_dir, tmp_path / "out", val_fraction=0.1)
    train, val = meta["splits"]["train"], meta["splits"]["val"]
    assert meta["split"] == "position" and train["documents"] == 1
    assert val["tokens"] == round(0.1 * (train["tokens"] + val["tokens"]))
    tok = load_tokenizer(tokenizer_dir)
    ids = np.fromfile(tmp_path / "out" / "train.bin", dtype=np.uint16).tolist()
    ids += np.fromfile(tmp_path / "out" / "val.bin", dtype=np.uint16).tolist()
    assert ids == tok.encode(book.read_text().strip("\n"), allowed_special="none") + [tok.eot_id]
    assert train["bytes"] + val["bytes"] == len(book.read_text().strip("\n").encode())
    val_ids = [i for i in np.fromfile(tmp_path / "out" / "val.bin", dtype=np.uint16).tolist() if i != tok.eot_id]
    assert len(tok.decode_bytes(val_ids)) == val["bytes"]
