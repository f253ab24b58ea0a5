"""Bad input gets a clear ``TokenizerError``."""

from __future__ import annotations

import pytest

from alilama_core.base.errors import TokenizerError


def test_empty_input(bpe):
    with pytest.raises(TokenizerError, match="empty"):
        bpe.train([], 300)
    with pytest.raises(TokenizerError, match="empty"):
        bpe.train(["", ""], 300)


def test_vocab_too_small(bpe):
    with pytest.raises(TokenizerError, match="at least 256"):
        bpe.train(["hello"], 255)
    with pytest.raises(TokenizerError, match=r"256 \(the bytes\) \+ 1"):
        bpe.train(["hello"], 256, special_tokens=["<|endoftext|>"])


def test_vocab_larger_than_text_allows_stops_early(bpe):
    with pytest.warns(UserWarning, match="allows only 3 merges, not 94"):
        tok = bpe.train(["abcd"], 351, special_tokens=["<|endoftext|>"])
    assert tok.stopped_early and tok.requested_vocab_size == 351
    assert len(tok.merges) == 3 and tok.vocab_size == 260
    assert tok.special_tokens == {"<|endoftext|>": 259}


@pytest.mark.parametrize(
    "specials, message",
    [
        (["<|a|>", "<|a|>"], "given twice"),
        (["<|end|>", "<|end|>x"], "collide"),
        ([""], "non-empty"),
        (["a b"], "whitespace"),
    ],
)
def test_colliding_special_tokens(bpe, specials, message):
    with pytest.raises(TokenizerError, match=message):
        bpe.train(["hello world"], 300, special_tokens=specials)


def test_disallowed_special_token_in_text(bpe):
    tok = bpe.train(["hello world"], 260, special_tokens=["<|endoftext|>"])
    text = "hi<|endoftext|>there"
    with pytest.raises(TokenizerError, match="contains the special token '<\\|endoftext\\|>'"):
        tok.encode(text)
    assert tok.encode(text, allowed_special="all")[2] == tok.eot_id
    assert tok.encode(text, allowed_special={"<|endoftext|>"}) == tok.encode(text, allowed_special="all")
    assert tok.eot_id not in tok.encode(text, allowed_special="none")
    assert tok.decode(tok.encode(text, allowed_special="none")) == text
    with pytest.raises(TokenizerError, match="unknown special"):
        tok.encode(text, allowed_special={"<|nope|>"})
    with pytest.raises(TokenizerError, match="contains the special token '<\\|endoftext\\|>'"):
        tok.encode_batch(["fine", text])
    # Found by the encoding threads wherever it is in a large batch.
    many = ["fine text"] * 5000
    for where in (0, 2500, 4999):
        batch = many[:where] + [text] + many[where + 1 :]
        with pytest.raises(TokenizerError, match="contains the special token"):
            tok.encode_batch(batch, threads=2)
        assert tok.encode_batch(batch, threads=2, allowed_special="all")[where][2] == tok.eot_id
        assert tok.eot_id not in tok.encode_batch(batch, threads=2, allowed_special="none")[where]


def test_non_utf8_file(bpe, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"hello world\n" * 10 + b"caf\xe9 au lait\n")
    with pytest.raises(TokenizerError, match=r"bad.txt: invalid UTF-8 at byte offset 123"):
        bpe.train_files([path], 300)
    tok = bpe.train_files([path], 270, errors="replace")
    with pytest.raises(TokenizerError, match="byte offset 123"):
        tok.encode_file(path)
    ids = tok.encode_file(path, errors="replace")
    assert tok.decode(ids) == (b"hello world\n" * 10 + b"caf\xe9 au lait\n").decode("utf-8", "replace")


def test_missing_file(bpe, tmp_path):
    with pytest.raises(TokenizerError, match="no such file"):
        bpe.train_files([tmp_path / "nope.txt"], 300)
    tok = bpe([])
    with pytest.raises(TokenizerError, match="no such file"):
        tok.encode_file(tmp_path / "nope.txt")


def test_unknown_ids_and_surrogates(bpe):
    tok = bpe.train(["hello world"], 260)
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        tok.decode([1, 2, 10_000])
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        tok.decode([-1])
    with pytest.raises(TokenizerError, match="surrogate"):
        tok.encode("bad \ud800 text")
    with pytest.raises(TypeError):
        tok.encode(b"bytes")  # type: ignore[arg-type]


def test_bad_merges(bpe):
    with pytest.raises(TokenizerError, match="not defined before"):
        bpe([(97, 256)])
    with pytest.raises(TokenizerError, match="repeat"):
        bpe([(97, 98), (97, 98)])
