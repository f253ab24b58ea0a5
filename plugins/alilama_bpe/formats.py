"""Files: minbpe ``.model``/``.vocab``, ``tokenizer_config.json``, HF ``tokenizer.json``, tiktoken.

The minbpe v1 ``.model`` format, line by line::

    minbpe v1
    <split pattern>
    <number of special tokens>
    <special token> <id>        (one line each)
    <left id> <right id>        (one line per merge, in order: merge i makes id 256 + i)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import unicodedata
from pathlib import Path
from alilama_bpe import reference
from alilama_bpe.vocabulary import NORMALIZERS, AddedToken, Vocabulary
from alilama_core.base.errors import TokenizerError
from alilama_core.base.files import atomic_write_text, make_temp_folder, replace_folder
from alilama_core.base.limits import loads_json

MODEL_FILE = "tokenizer.model"
VOCAB_FILE = "tokenizer.vocab"
CONFIG_FILE = "tokenizer_config.json"
HF_FILE = "tokenizer.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"
HF_FILES = (HF_FILE, SPECIAL_MAP_FILE)
FORMAT_VERSION = 1
NEWEST_FORMAT = 3
"""Versions of ``tokenizer_config.json``: 1 Alilama's numbering, 2 a vocabulary's own ids (``ids``), 3 a
normalizer or added tokens (``normalizer``, ``added_tokens``), which an older reader would drop."""


def model_text(tok: Vocabulary) -> str:
    lines = ["minbpe v1", tok.pattern, str(len(tok.special_tokens))]
    lines += [f"{t} {i}" for t, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1])]
    lines += [f"{a} {b}" for a, b in tok.merges]
    return "\n".join(lines) + "\n"


def render_token(b: bytes) -> str:
    """Printable form of token bytes: invalid UTF-8 as U+FFFD, control characters escaped."""
    s = b.decode("utf-8", errors="replace")
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c)[0] == "C" else c for c in s)


def vocab_text(tok: Vocabulary) -> str:
    vocab = reference.vocab_bytes(tok.merges)
    ids = tok.ids or range(len(vocab))
    lines = []
    for i in range(256):
        lines.append(f"[{render_token(vocab[i])}] {ids[i]}")
    for k, (a, b) in enumerate(tok.merges):
        i = 256 + k
        lines.append(f"[{render_token(vocab[a])}][{render_token(vocab[b])}] -> [{render_token(vocab[i])}] {ids[i]}")
    for t, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1]):
        lines.append(f"[{t}] {i} (special)")
    for added in tok.added_tokens:
        if not added.special:
            lines.append(f"[{render_token(added.content.encode('utf-8'))}] {added.id} (added)")
    return "\n".join(lines) + "\n"


def config_dict(tok: Vocabulary, model: str) -> dict:
    """``tokenizer_config.json`` of ``tok``, whose ``.model`` text is ``model``."""
    return {
        "name": tok.name,
        "format": "minbpe v1",
        "format_version": FORMAT_VERSION,
        "model_file": MODEL_FILE,
        "vocab_file": VOCAB_FILE,
        "vocab_size": tok.vocab_size,
        "num_merges": len(tok.merges),
        "special_tokens": tok.special_tokens,
        "pattern": tok.pattern,
        "model_sha256": hashlib.sha256(model.encode("utf-8")).hexdigest(),
        **({"ids": id_runs(tok.ids), "format_version": 2} if tok.ids is not None else {}),
        **({"normalizer": tok.normalizer, "format_version": 3} if tok.normalizer else {}),
        **({"added_tokens": added, "format_version": 3} if (added := stored_added_tokens(tok)) else {}),
    }


def stored_added_tokens(tok: Vocabulary) -> list[dict]:
    """The added tokens a folder records: those that are not special, and special ones with other flags than
    the defaults (HF tokenizers' for a special token: found where its text occurs, before normalizing)."""
    return [t.as_dict() for t in tok.added_tokens if not t.special or t != AddedToken(t.content, t.id, special=True)]


def read_added(path: Path) -> tuple[str | None, list]:
    """The normalizer and added tokens recorded in a saved folder's config (None and [] when none are)."""
    config = _config(path)
    cpath = (path if path.is_dir() else path.parent) / CONFIG_FILE
    normalizer = config.get("normalizer")
    if normalizer is not None and normalizer not in NORMALIZERS:
        raise TokenizerError(f"{cpath} is corrupt: unknown normalizer {normalizer!r}")
    entries = config.get("added_tokens") or []
    if not isinstance(entries, list):
        raise TokenizerError(f"{cpath} is corrupt: its 'added_tokens' is not a list")
    try:
        return normalizer, [AddedToken.from_dict(e, str(cpath)) for e in entries]
    except TypeError as e:
        raise TokenizerError(f"{cpath} is corrupt: {e}") from None


def _config(path: Path) -> dict:
    """A saved folder's ``tokenizer_config.json`` (``{}`` when it has none)."""
    cpath = (path if path.is_dir() else path.parent) / CONFIG_FILE
    if not cpath.is_file():
        return {}
    try:
        config = loads_json(cpath.read_text(encoding="utf-8"), TokenizerError, str(cpath))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"{cpath} is corrupt: {e}") from None
    if not isinstance(config, dict):
        raise TokenizerError(f"{cpath} is corrupt: it does not hold a JSON object")
    return config


def id_runs(ids: list[int]) -> list[list[int]]:
    """``ids`` as runs ``[first internal id, first id, length]`` (a tiktoken vocabulary is a few hundred)."""
    runs: list[list[int]] = []
    for i, v in enumerate(ids):
        if runs and runs[-1][1] + runs[-1][2] == v and runs[-1][0] + runs[-1][2] == i:
            runs[-1][2] += 1
        else:
            runs.append([i, v, 1])
    return runs


def read_ids(path: Path) -> list[int] | None:
    """The vocabulary's own ids recorded in a saved folder's config (None: Alilama's numbering)."""
    cpath = (path if path.is_dir() else path.parent) / CONFIG_FILE
    if not cpath.is_file():
        return None
    try:
        runs = loads_json(cpath.read_text(encoding="utf-8"), TokenizerError, str(cpath)).get("ids")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise TokenizerError(f"{cpath} is corrupt: {e}") from None
    if runs is None:
        return None
    ids: list[int] = []
    try:
        for start, first, length in runs:
            if start != len(ids) or length < 1:
                raise ValueError(f"run {[start, first, length]} does not continue at {len(ids)}")
            ids.extend(range(first, first + length))
    except (TypeError, ValueError) as e:
        raise TokenizerError(f"{cpath} is corrupt: its 'ids' are not runs [internal id, id, length] ({e})") from None
    return ids


def save(tok: Vocabulary, directory: Path) -> None:
    """Write the tokenizer folder: in a temporary sibling folder, then moved into place.

    The folder is locked while it is written (a second writer fails at once,
    naming the holder's PID), so two saves never mix their files. A new folder
    (or one holding only these files) is swapped in by renaming; in a folder that
    holds other files too, the files are replaced one by one, the config last:
    its hash of ``tokenizer.model`` makes a half-replaced folder fail to load.
    """
    from alilama_core.base.errors import FolderBusyError
    from alilama_core.base.files import exclusive_lock

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise TokenizerError(f"cannot save the tokenizer into {directory}: it is a file, not a folder")
    model = model_text(tok)
    files = {
        MODEL_FILE: model,
        VOCAB_FILE: vocab_text(tok),
    }
    if (directory / HF_FILE).is_file():  # written by save_hf before: kept in step with the model
        files.update(hf_files(tok))
    files[CONFIG_FILE] = json.dumps(config_dict(tok, model), indent=2, ensure_ascii=False) + "\n"
    try:
        with exclusive_lock(directory, what="tokenizer folder"):
            _write_folder(directory, files)
    except FolderBusyError as e:
        raise TokenizerError(str(e)) from None
    except OSError as e:
        raise TokenizerError(f"cannot save the tokenizer into {directory}: {e.strerror or e}") from None


def _write_folder(directory: Path, files: dict[str, str]) -> None:
    tmp = make_temp_folder(directory.parent, prefix=f".{directory.name}.")
    try:
        for name, text in files.items():
            atomic_write_text(tmp / name, text)
        if not directory.exists() or {p.name for p in directory.iterdir()} <= set(files) | set(HF_FILES):
            replace_folder(tmp, directory)
            return
        for name in files:  # the config last
            os.replace(tmp / name, directory / name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


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


def read_folder(path: Path) -> tuple[list[tuple[int, int]], dict[str, int], str]:
    """Merges, special tokens and pattern of a saved folder (or a ``.model`` file).

    In a folder (or given as the path of a saved folder's ``tokenizer.model``
    itself), ``tokenizer.model`` is checked against ``tokenizer_config.json``:
    the hash recorded there (folders saved before hashes were recorded have none),
    the number of merges, the vocabulary size and the special tokens. A file that
    was truncated, edited or swapped is refused with an error naming it.
    """
    mpath = model_path(path)
    cpath = mpath.parent / CONFIG_FILE
    if not cpath.is_file() or (not path.is_dir() and mpath.name != MODEL_FILE):
        return read_model(mpath)  # a lone .model file: nothing recorded to check it against
    config = _config(mpath)
    version = config.get("format_version")
    if isinstance(version, int) and version > NEWEST_FORMAT:
        raise TokenizerError(
            f"{cpath} has format_version {version}; this Alilama reads versions up to {NEWEST_FORMAT}: "
            f"the folder was saved by a newer release"
        )
    try:
        raw = mpath.read_bytes()
    except OSError as e:
        raise TokenizerError(f"cannot read {mpath}: {e.strerror or e}") from None

    def mismatch(what: str) -> TokenizerError:
        return TokenizerError(
            f"{mpath} does not match {cpath.name} ({what}): the file was truncated, edited or replaced "
            f"after the tokenizer was saved; save or train the tokenizer again"
        )

    expected = config.get("model_sha256")
    if expected is not None and hashlib.sha256(raw).hexdigest() != expected:
        merges = None
        try:  # say what differs when the file still parses
            merges, _, _ = read_model(mpath, raw)
        except TokenizerError:
            pass
        n = config.get("num_merges")
        if merges is not None and isinstance(n, int) and len(merges) != n:
            raise mismatch(f"{len(merges)} merges, the config records {n}")
        if not raw.endswith(b"\n"):
            raise mismatch("it ends in the middle of a line, and its SHA-256 differs from the one recorded")
        raise mismatch("its SHA-256 differs from the one recorded")
    merges, specials, pattern = read_model(mpath, raw)
    n = config.get("num_merges")
    if isinstance(n, int) and len(merges) != n:
        raise mismatch(f"{len(merges)} merges, the config records {n}")
    if "special_tokens" in config and config["special_tokens"] != specials:
        raise mismatch(f"special tokens {specials}, the config records {config['special_tokens']}")
    size = config.get("vocab_size")
    own_ids = "ids" in config  # an imported vocabulary's ids: its size is checked when they are read
    added = [t.get("id") for t in config.get("added_tokens") or [] if isinstance(t, dict)]
    top = max([256 + len(merges), *(i + 1 for i in specials.values()), *(i + 1 for i in added if isinstance(i, int))])
    if isinstance(size, int) and not own_ids and size != top:
        raise mismatch(f"the vocabulary size differs from the {size} recorded")
    return merges, specials, pattern


def read_model(path: Path, raw: bytes | None = None) -> tuple[list[tuple[int, int]], dict[str, int], str]:
    """Merges, special tokens and pattern of a minbpe v1 ``.model`` file.

    Merges that would build a token longer than ``reference.MAX_TOKEN_BYTES``
    (or a vocabulary of more than ``reference.MAX_VOCAB_BYTES``) are refused
    here, from the token lengths alone, before any vocabulary is built.
    """
    try:
        text = (raw if raw is not None else path.read_bytes()).decode("utf-8")
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
    lengths = [1] * 256
    total = 256
    for k, line in enumerate(lines[3 + n_special :]):
        lineno = 4 + n_special + k
        parts = line.split()
        if len(parts) != 2 or not (parts[0].isdigit() and parts[1].isdigit()):
            raise bad(lineno, f"expected a merge '<id> <id>', found {line[:60]!r}")
        a, b = int(parts[0]), int(parts[1])
        if a >= 256 + k or b >= 256 + k:
            raise bad(lineno, f"merge ({a}, {b}) uses an id not defined before it")
        length = lengths[a] + lengths[b]
        if length > reference.MAX_TOKEN_BYTES:
            raise bad(
                lineno,
                f"merge ({a}, {b}) makes a token of {length} bytes; tokens are limited to "
                f"{reference.MAX_TOKEN_BYTES} bytes",
            )
        total += length
        if total > reference.MAX_VOCAB_BYTES:
            raise bad(lineno, f"the merges make a vocabulary of more than {reference.MAX_VOCAB_BYTES} bytes")
        lengths.append(length)
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


def hf_tokenizer_json(tok: Vocabulary) -> dict:
    from alilama_bpe import patterns

    b2u = bytes_to_unicode()
    vocab_bytes = reference.vocab_bytes(tok.merges)
    ids = tok.ids or range(len(vocab_bytes))
    strings = ["".join(b2u[x] for x in b) for b in vocab_bytes]
    vocab: dict[str, int] = {}
    for i, s in enumerate(strings):
        if s in vocab:
            raise TokenizerError(
                f"ids {vocab[s]} and {ids[i]} have the same bytes {vocab_bytes[i]!r}; tokenizer.json cannot hold both"
            )
        vocab[s] = ids[i]
    for added in tok.added_tokens:
        # In the model's vocabulary too, so that `tokenizers` keeps the id (an added token
        # that the model does not know is given the next free id instead, gaps ignored).
        t, i = added.content, added.id
        if vocab.get(t, i) != i:
            what = "special token" if added.special else "added token"
            raise TokenizerError(
                f"{what} {t!r} spells the same string as id {vocab[t]}; tokenizer.json cannot hold both"
            )
        vocab[t] = i
    merges = [f"{strings[a]} {strings[b]}" for a, b in tok.merges]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [t.as_dict() for t in tok.added_tokens],
        "normalizer": {"type": tok.normalizer} if tok.normalizer else None,
        "pre_tokenizer": (
            # GPT-2's own split is written as GPT-2's tokenizer.json writes it (ByteLevel's regex)
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
            if patterns.native_split(tok.pattern) == patterns.NATIVE_SPLIT[patterns.GPT2]
            else {
                "type": "Sequence",
                "pretokenizers": [
                    {
                        "type": "Split",
                        "pattern": {"Regex": patterns.HF_SPELLING.get(tok.pattern, tok.pattern)},
                        "behavior": "Isolated",
                        "invert": False,
                    },
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
                ],
            }
        ),
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


def special_tokens_map(tok: Vocabulary) -> dict[str, str]:
    """transformers' ``special_tokens_map.json``: end of text as ``eos_token`` (and ``bos``/``pad``).

    Alilama separates documents with ``<|endoftext|>``, so it begins and ends
    them too; ``<|pad|>`` pads when the tokenizer has it, else end of text.
    """
    eot = "<|endoftext|>" if "<|endoftext|>" in tok.special_tokens else None
    out: dict[str, str] = {}
    if eot is not None:
        out.update(bos_token=eot, eos_token=eot, pad_token=eot)
    if "<|pad|>" in tok.special_tokens:
        out["pad_token"] = "<|pad|>"
    return out


def hf_files(tok: Vocabulary) -> dict[str, str]:
    """Contents of ``tokenizer.json`` and ``special_tokens_map.json``."""
    return {
        HF_FILE: json.dumps(hf_tokenizer_json(tok), ensure_ascii=False),
        SPECIAL_MAP_FILE: json.dumps(special_tokens_map(tok), indent=2, ensure_ascii=False) + "\n",
    }


def save_hf(tok: Vocabulary, directory: Path) -> Path:
    """Write ``tokenizer.json`` and ``special_tokens_map.json``; returns the first one's path."""
    if directory.exists() and not directory.is_dir():
        raise TokenizerError(f"cannot write tokenizer.json into {directory}: it is a file, not a folder")
    try:
        for name, text in hf_files(tok).items():
            atomic_write_text(directory / name, text)
    except OSError as e:
        raise TokenizerError(f"cannot write tokenizer.json into {directory}: {e.strerror or e}") from None
    return directory / HF_FILE


# ---------------------------------------------------------------- tiktoken


def tiktoken_encoding(tok: Vocabulary, name: str = "alilama-bpe"):
    """A ``tiktoken.Encoding`` whose ranks are Alilama's ids.

    tiktoken merges by the rank of the concatenated bytes, so ids must have
    distinct bytes (they do unless two merges spell the same string).
    """
    if tok.normalizer:
        raise TokenizerError(
            f"tiktoken has no normalizer: this tokenizer applies {tok.normalizer} to the text before splitting "
            f"it, which a tiktoken Encoding would not do (its ids would differ on text that {tok.normalizer} changes)"
        )
    plain = [t for t in tok.added_tokens if not t.special]
    if plain:
        shown = ", ".join(f"{t.content!r} ({t.id})" for t in plain[:5]) + (", ..." if len(plain) > 5 else "")
        raise TokenizerError(
            f"tiktoken has no added tokens that are not special: this tokenizer finds {len(plain)} such tokens "
            f"in any text ({shown}), which a tiktoken Encoding would encode as ordinary text"
        )
    stripping = [t.content for t in tok.added_tokens if not t.plain]
    if stripping:
        raise TokenizerError(
            f"tiktoken finds special tokens exactly where their text occurs; {stripping[0]!r} takes in the "
            f"whitespace beside it or is found only as a whole word (lstrip/rstrip/single_word)"
        )
    try:
        import tiktoken
    except ImportError as e:
        raise TokenizerError("to_tiktoken() needs the tiktoken package: pip install tiktoken") from e
    vocab_bytes = reference.vocab_bytes(tok.merges)
    ids = tok.ids or range(len(vocab_bytes))
    ranks: dict[bytes, int] = {}
    for i, b in enumerate(vocab_bytes):
        if b in ranks:
            raise TokenizerError(f"ids {ranks[b]} and {ids[i]} have the same bytes {b!r}; tiktoken cannot hold both")
        ranks[b] = ids[i]
    return tiktoken.Encoding(
        name=name,
        pat_str=tok.pattern,
        mergeable_ranks=ranks,
        special_tokens=dict(tok.special_tokens),
        explicit_n_vocab=tok.vocab_size if _contiguous(tok) else None,
    )


def _contiguous(tok: Vocabulary) -> bool:
    ids = sorted([*(tok.ids or range(256 + len(tok.merges))), *tok.special_tokens.values()])
    return ids == list(range(len(ids)))
