"""Files: minbpe ``.model``/``.vocab``, ``tokenizer_config.json``, HF ``tokenizer.json``, tiktoken.

The minbpe v1 ``.model`` format, line by line::

    minbpe v1
    <split pattern>
    <number of special tokens>
    <special token> <id>        (one line each)
    <left id> <right id>        (one line per merge, in order: merge i makes id 256 + i)
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

from alilama_core.errors import TokenizerError
from alilama_core.files import atomic_write_text

from alilama_bpe import reference

if TYPE_CHECKING:
    from alilama_bpe.tokenizer import BPETokenizer

MODEL_FILE = "tokenizer.model"
VOCAB_FILE = "tokenizer.vocab"
CONFIG_FILE = "tokenizer_config.json"
HF_FILE = "tokenizer.json"
FORMAT_VERSION = 1


def model_text(tok: "BPETokenizer") -> str:
    lines = ["minbpe v1", tok.pattern, str(len(tok.special_tokens))]
    lines += [f"{t} {i}" for t, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1])]
    lines += [f"{a} {b}" for a, b in tok.merges]
    return "\n".join(lines) + "\n"


def render_token(b: bytes) -> str:
    """Printable form of token bytes: invalid UTF-8 as U+FFFD, control characters escaped."""
    s = b.decode("utf-8", errors="replace")
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c)[0] == "C" else c for c in s)


def vocab_text(tok: "BPETokenizer") -> str:
    vocab = reference.vocab_bytes(tok.merges)
    lines = []
    for i in range(256):
        lines.append(f"[{render_token(vocab[i])}] {i}")
    for k, (a, b) in enumerate(tok.merges):
        i = 256 + k
        lines.append(f"[{render_token(vocab[a])}][{render_token(vocab[b])}] -> [{render_token(vocab[i])}] {i}")
    for t, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1]):
        lines.append(f"[{t}] {i} (special)")
    return "\n".join(lines) + "\n"


def save(tok: "BPETokenizer", directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(directory / MODEL_FILE, model_text(tok))
    atomic_write_text(directory / VOCAB_FILE, vocab_text(tok))
    config = {
        "name": tok.name,
        "format": "minbpe v1",
        "format_version": FORMAT_VERSION,
        "model_file": MODEL_FILE,
        "vocab_file": VOCAB_FILE,
        "vocab_size": tok.vocab_size,
        "num_merges": len(tok.merges),
        "special_tokens": tok.special_tokens,
        "pattern": tok.pattern,
    }
    atomic_write_text(directory / CONFIG_FILE, json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def model_path(path: Path) -> Path:
    """The ``.model`` file of a saved folder (or ``path`` itself when it is a file)."""
    if path.is_dir():
        candidate = path / MODEL_FILE
        if not candidate.is_file():
            models = sorted(path.glob("*.model"))
            if len(models) == 1:
                return models[0]
            raise TokenizerError(f"{path} holds no {MODEL_FILE}: not a saved BPE tokenizer folder")
        return candidate
    if not path.is_file():
        raise TokenizerError(f"no such tokenizer file or folder: {path}")
    return path


def read_model(path: Path) -> tuple[list[tuple[int, int]], dict[str, int], str]:
    """Merges, special tokens and pattern of a minbpe v1 ``.model`` file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path} is corrupt: invalid UTF-8 at byte offset {e.start}") from None
    except OSError as e:
        raise TokenizerError(f"cannot read {path}: {e}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def bad(lineno: int, why: str) -> TokenizerError:
        return TokenizerError(f"{path} is corrupt at line {lineno}: {why}")

    if not lines or lines[0].strip() != "minbpe v1":
        raise bad(1, f"expected the header 'minbpe v1', found {lines[0][:40]!r}" if lines else "the file is empty")
    if len(lines) < 3:
        raise bad(len(lines) + 1, "the file ends before the number of special tokens")
    pattern = lines[1]
    try:
        n_special = int(lines[2])
    except ValueError:
        raise bad(3, f"expected the number of special tokens, found {lines[2][:40]!r}") from None
    if n_special < 0 or 3 + n_special > len(lines):
        raise bad(3, f"{n_special} special tokens announced, the file is shorter")
    specials: dict[str, int] = {}
    for k in range(n_special):
        lineno = 4 + k
        parts = lines[3 + k].strip().rsplit(maxsplit=1)
        if len(parts) != 2 or not parts[1].isdigit():
            raise bad(lineno, f"expected '<special token> <id>', found {lines[3 + k][:60]!r}")
        specials[parts[0]] = int(parts[1])
    merges: list[tuple[int, int]] = []
    for k, line in enumerate(lines[3 + n_special :]):
        lineno = 4 + n_special + k
        parts = line.split()
        if len(parts) != 2 or not (parts[0].isdigit() and parts[1].isdigit()):
            raise bad(lineno, f"expected a merge '<id> <id>', found {line[:60]!r}")
        a, b = int(parts[0]), int(parts[1])
        if a >= 256 + k or b >= 256 + k:
            raise bad(lineno, f"merge ({a}, {b}) uses an id not defined before it")
        merges.append((a, b))
    return merges, specials, pattern


# ---------------------------------------------------------------- Hugging Face


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map of the 256 bytes to printable characters.

    Printable Latin-1 bytes map to themselves; the rest (control characters,
    space, ...) map to code points from 256 upwards, in byte order.
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def hf_tokenizer_json(tok: "BPETokenizer") -> dict:
    b2u = bytes_to_unicode()
    vocab_bytes = reference.vocab_bytes(tok.merges)
    strings = ["".join(b2u[x] for x in b) for b in vocab_bytes]
    vocab: dict[str, int] = {}
    for i, s in enumerate(strings):
        if s in vocab:
            raise TokenizerError(
                f"ids {vocab[s]} and {i} have the same bytes {vocab_bytes[i]!r}; tokenizer.json cannot hold both"
            )
        vocab[s] = i
    merges = [f"{strings[a]} {strings[b]}" for a, b in tok.merges]
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1])
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": tok.pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def save_hf(tok: "BPETokenizer", directory: Path) -> Path:
    path = directory / HF_FILE
    atomic_write_text(path, json.dumps(hf_tokenizer_json(tok), ensure_ascii=False))
    return path


# ---------------------------------------------------------------- tiktoken


def tiktoken_encoding(tok: "BPETokenizer", name: str = "alilama-bpe"):
    """A ``tiktoken.Encoding`` whose ranks are Alilama's ids.

    tiktoken merges by the rank of the concatenated bytes, so ids must have
    distinct bytes (they do unless two merges spell the same string).
    """
    try:
        import tiktoken
    except ImportError as e:
        raise TokenizerError("to_tiktoken() needs the tiktoken package: pip install tiktoken") from e
    vocab_bytes = reference.vocab_bytes(tok.merges)
    ranks: dict[bytes, int] = {}
    for i, b in enumerate(vocab_bytes):
        if b in ranks:
            raise TokenizerError(f"ids {ranks[b]} and {i} have the same bytes {b!r}; tiktoken cannot hold both")
        ranks[b] = i
    return tiktoken.Encoding(
        name=name,
        pat_str=tok.pattern,
        mergeable_ranks=ranks,
        special_tokens=dict(tok.special_tokens),
        explicit_n_vocab=tok.vocab_size if _contiguous(tok) else None,
    )


def _contiguous(tok: "BPETokenizer") -> bool:
    ids = sorted(tok.special_tokens.values())
    return ids == list(range(256 + len(tok.merges), 256 + len(tok.merges) + len(ids)))
