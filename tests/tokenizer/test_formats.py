"""minbpe ``.model``/``.vocab`` files, the config file, atomic writes, corrupt files."""

from __future__ import annotations

import json

import pytest
from alilama_bpe.reference import GPT4_SPLIT_PATTERN

from alilama_core.base.errors import TokenizerError


@pytest.fixture
def trained(bpe, stories):
    return bpe.train([stories[:80_000]], 600, special_tokens=["<|endoftext|>"])


def test_save_load_roundtrip(bpe, trained, stories, tmp_path):
    trained.save(tmp_path / "tok")
    names = sorted(p.name for p in (tmp_path / "tok").iterdir())
    assert names == ["tokenizer.model", "tokenizer.vocab", "tokenizer_config.json"]  # no temp files left
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["name"] == "bpe" and config["vocab_size"] == 600
    loaded = bpe.load(tmp_path / "tok")
    assert loaded.merges == trained.merges
    assert loaded.special_tokens == trained.special_tokens
    sample = stories[-30_000:]
    assert loaded.encode(sample, allowed_special="all") == trained.encode(sample, allowed_special="all")
    # the .model file itself loads too
    assert bpe.load(tmp_path / "tok" / "tokenizer.model").merges == trained.merges


def test_model_file_layout(trained, tmp_path):
    trained.save(tmp_path)
    lines = (tmp_path / "tokenizer.model").read_text().splitlines()
    assert lines[0] == "minbpe v1"
    assert lines[1] == GPT4_SPLIT_PATTERN
    assert lines[2] == "1"
    assert lines[3] == "<|endoftext|> 599"
    assert [tuple(map(int, ln.split())) for ln in lines[4:]] == trained.merges
    vocab = (tmp_path / "tokenizer.vocab").read_text().splitlines()
    assert vocab[32] == "[ ] 32" and vocab[10] == "[\\u000a] 10"
    assert " -> " in vocab[256] and vocab[-1] == "[<|endoftext|>] 599 (special)"


def _write_like_minbpe(path, pattern, specials, merges):
    """The file minbpe's Tokenizer.save writes (written here independently)."""
    with open(path, "w") as f:
        f.write("minbpe v1\n")
        f.write(f"{pattern}\n")
        f.write(f"{len(specials)}\n")
        for s, i in specials.items():
            f.write(f"{s} {i}\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")


@pytest.mark.slow  # trains minbpe's tokenizer on real text
def test_loading_a_minbpe_file_gives_minbpe_encodings(bpe, minbpe, stories, tmp_path):
    text = stories[:40_000]
    merges = minbpe.merges(text, 256 + 80)
    path = tmp_path / "regex.model"
    _write_like_minbpe(path, GPT4_SPLIT_PATTERN, {"<|endoftext|>": 336}, merges)
    tok = bpe.load(path)
    sample = stories[40_000:60_000].replace("<|endoftext|>", "")
    assert tok.encode(sample) == minbpe.encode(sample, merges)
    assert tok.special_tokens == {"<|endoftext|>": 336}


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty"),
        ("minbpe v2\nx\n0\n", "header"),
        ("minbpe v1\n", "ends before"),
        (f"minbpe v1\n{GPT4_SPLIT_PATTERN}\nzero\n", "number of special tokens"),
        (f"minbpe v1\n{GPT4_SPLIT_PATTERN}\n2\n<|a|> 300\n", "announced"),
        (f"minbpe v1\n{GPT4_SPLIT_PATTERN}\n1\n<|a|>\n", "special token"),
        (f"minbpe v1\n{GPT4_SPLIT_PATTERN}\n0\n97 98\n256 oops\n", "line 5"),
        (f"minbpe v1\n{GPT4_SPLIT_PATTERN}\n0\n97 98\n258 97\n", "not defined"),
        (f"minbpe v1\n{GPT4_SPLIT_PATTERN}\n1\n<|a|> 5\n97 98\n", "taken by a byte"),
    ],
)
def test_corrupt_model_files(bpe, tmp_path, content, message):
    path = tmp_path / "tokenizer.model"
    path.write_text(content)
    with pytest.raises(TokenizerError, match=message):
        bpe.load(tmp_path)


def test_missing_and_binary_model_files(bpe, tmp_path):
    with pytest.raises(TokenizerError, match="no such tokenizer"):
        bpe.load(tmp_path / "nope")
    with pytest.raises(TokenizerError, match="holds no tokenizer.model"):
        bpe.load(tmp_path)
    (tmp_path / "tokenizer.model").write_bytes(b"minbpe v1\n\xff\xfe\n")
    with pytest.raises(TokenizerError, match="invalid UTF-8 at byte offset 10"):
        bpe.load(tmp_path)


def test_save_replaces_atomically(trained, tmp_path):
    trained.save(tmp_path)
    before = (tmp_path / "tokenizer.model").read_text()
    trained.save(tmp_path)
    assert (tmp_path / "tokenizer.model").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
