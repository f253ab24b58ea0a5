"""The native pre-tokenizer equals the ``regex`` module's ``findall`` with the GPT-4 pattern.

The native tables come from the Unicode database Python ships
(``unicodedata``); the ``regex`` module may know a newer Unicode version, so
generated text avoids code points unassigned in Python's database (their
class differs between versions, and only there).
"""

from __future__ import annotations

import random
import sys
import unicodedata

import pytest
import regex
from alilama_bpe import reference


@pytest.fixture
def split(impl):
    if impl == "native":
        from alilama_bpe import _native

        return _native.split
    return reference.split


def expected(text: str) -> list[str]:
    return regex.findall(reference.GPT4_SPLIT_PATTERN, text)


def test_tricky_strings(split, tricky):
    for s in tricky:
        assert split(s) == expected(s), s


def test_real_text(split, stories, book):
    assert split(stories) == expected(stories)
    assert split(book) == expected(book)


def _assigned(cp: int) -> bool:
    return not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn"


def _pool(rng: random.Random) -> list[str]:
    pool = []
    for plane in range(17):  # every plane: a sample of its assigned code points
        cps = [cp for cp in range(plane << 16, (plane + 1) << 16, 7) if _assigned(cp)]
        pool += [chr(cp) for cp in rng.sample(cps, min(len(cps), 300))]
    pool += [chr(c) for c in range(0x300, 0x370)]  # combining marks
    pool += [chr(c) for c in range(0x4E00, 0x4E00 + 200)]  # CJK
    pool += list("😀😉👍🏽🇫🇷👩‍👧") + ["\u200d", "\ufe0f"]  # emoji, ZWJ, variation selector
    pool += [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()] + ["\x1c", "\x1f", "\x85"]
    pool += list("0123456789٠١٢३४५ⅫⅠ½²")
    pool += list("'''") + list("sdmtlvreSDMTLVREſ")  # contractions in both cases
    pool += ["\r\n", "\r", "\n", "\n\n", "  ", " ", "\t"]
    pool += list('abcXYZ.,;:!?-—()[]{}<>"“”')
    return pool


@pytest.mark.parametrize("seed", range(4))
def test_generated_text_covering_every_plane(split, seed):
    rng = random.Random(seed)
    pool = _pool(rng)
    for _ in range(300):
        s = "".join(rng.choice(pool) for _ in range(rng.randint(1, 80)))
        assert split(s) == expected(s), repr(s)


def test_contractions_both_cases(split):
    for c in ["s", "d", "m", "t", "ll", "ve", "re", "ſ"]:
        for variant in {c, c.upper(), c.capitalize(), c[0] + c[1:].upper()}:
            for s in [f"x'{variant}", f"'{variant}x", f" '{variant} ", f"''{variant}"]:
                assert split(s) == expected(s), s


def test_digit_runs_and_newlines(split):
    for n in range(1, 12):
        s = "a" + "7" * n + "b\r\n\r\n  \n x" + " " * n + "\n"
        assert split(s) == expected(s)


def test_native_split_of_bytes_never_fails_on_invalid_utf8(impl):
    if impl != "native":
        pytest.skip("bytes input is a native-only entry point")
    from alilama_bpe import _native

    rng = random.Random(0)
    for _ in range(2000):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
        parts = _native.split(data)
        assert b"".join(parts) == data
        assert all(parts)


def test_ascii_letter_runs_at_every_length_and_boundary(split):
    # The native scanner reads letters eight bytes at a time: runs of every length
    # up to 20, ending at every kind of neighbour (the bytes around 'A'-'Z' and
    # 'a'-'z', a digit, a non-ASCII letter or mark, the end of the text).
    word = "abcXYZdefGHIjklMNOpqr"
    ends = ["", " ", "@", "[", "`", "{", "_", "0", "'s", "é", "\u0301", "ß", "\n", "\x00", "\x7f", "日"]
    for n in range(1, 21):
        for prefix in ("", " ", "(", "é"):
            for end in ends:
                s = prefix + word[:n] + end + " x"
                assert split(s) == expected(s), s
                assert split(prefix + word[:n] + end) == expected(prefix + word[:n] + end)
