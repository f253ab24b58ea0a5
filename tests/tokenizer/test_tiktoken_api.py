"""``encode``'s special-token options mean what tiktoken's mean, case by case."""

from __future__ import annotations

import pytest

from alilama_core.base.errors import TokenizerError

EOT, PAD = "<|endoftext|>", "<|pad|>"
TEXTS = ["plain text", f"one{EOT}two", f"pad{PAD}here", f"{EOT}both{PAD}{EOT}", f"<|endof{EOT}text|>"]
ALLOWED = ["all", set(), {EOT}, {PAD}, frozenset({EOT, PAD})]
DISALLOWED = [None, "all", (), {PAD}, {EOT}, [EOT, PAD], {"<|absent|>"}]


@pytest.fixture(scope="module")
def pair(stories):
    pytest.importorskip("tiktoken")
    from alilama_bpe.tokenizer import BPETokenizer

    base = BPETokenizer.train([stories[:50_000]], 600, special_tokens=[EOT, PAD])
    return base.merges, base.special_tokens, base.to_tiktoken()


def _outcome(fn):
    try:
        return fn()
    except ValueError:  # tiktoken raises ValueError; TokenizerError is one
        return "raises ValueError"


def option_id(value) -> str:
    """A test id that does not depend on set order (which differs between processes: hash randomisation)."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(value)})"
    return repr(value)


@pytest.mark.parametrize("allowed", ALLOWED, ids=option_id)
@pytest.mark.parametrize("disallowed", DISALLOWED, ids=option_id)
def test_encode_options_as_tiktoken(bpe, pair, allowed, disallowed):
    merges, specials, enc = pair
    tok = bpe(merges, specials)
    kw = {} if disallowed is None else {"disallowed_special": disallowed}
    for text in TEXTS:
        theirs = _outcome(lambda t=text: enc.encode(t, allowed_special=allowed, **kw))
        ours = _outcome(lambda t=text: tok.encode(t, allowed_special=allowed, **kw))
        assert ours == theirs, text
    theirs = _outcome(lambda: enc.encode_batch(TEXTS, allowed_special=allowed, **kw))
    ours = _outcome(lambda: tok.encode_batch(TEXTS, allowed_special=allowed, **kw))
    assert ours == theirs


def test_alilama_names_for_the_usual_cases(bpe, pair):
    merges, specials, enc = pair
    tok = bpe(merges, specials)
    text = TEXTS[3]
    assert tok.encode(text, allowed_special="none") == enc.encode(text, disallowed_special=())
    assert tok.encode(text, allowed_special="all") == enc.encode(text, allowed_special="all")
    with pytest.raises(TokenizerError, match="disallowed_special=\\(\\)"):
        tok.encode(text, allowed_special="none_raise")
    with pytest.raises(TokenizerError, match="unknown special tokens"):
        tok.encode(text, allowed_special={"<|nope|>"})
    with pytest.raises(TokenizerError, match="disallowed_special must be"):
        tok.encode(text, disallowed_special="some")
    with pytest.raises(TokenizerError, match="errors must be"):
        tok.encode(text, errors="ignore")


def test_encode_bytes_takes_any_bytes(bpe, pair):
    merges, specials, enc = pair
    tok = bpe(merges, specials)
    for data in [
        b"",
        b"hello world",
        "naïve 😉 <|endoftext|>".encode(),
        b"\xff\xfe ab\xe0\xa0cd \xed\xa0\x80!",
        "é".encode()[:1] + b" tail",
        bytes(range(256)),
    ]:
        ids = tok.encode_bytes(data)
        assert tok.decode_bytes(ids) == data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert ids == tok.encode(text, allowed_special="none") == enc.encode_ordinary(text)


def test_encode_bytes_agrees_between_backends(pair):
    from alilama_bpe import _backend
    from alilama_bpe.tokenizer import BPETokenizer

    if _backend.native is None:
        pytest.skip(f"native BPE backend: {_backend.IMPORT_ERROR}")
    import random

    merges, specials, _ = pair
    native = BPETokenizer(merges, specials, backend="native")
    python = BPETokenizer(merges, specials, backend="python")
    rng = random.Random(3)
    pieces = [b"ab", b" ", b"\n", b"12", b"\xff", b"\xe0\xa0", b"\xf0\x9f", b"\xc3", b"\xc3\xa9", b"!", b"'s", b"\xed"]
    for _ in range(3000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert native.encode_bytes(data) == python.encode_bytes(data), data
