"""A tokenizer folder on disk: the tokenizer's own files and ``alilama_tokenizer.json``, which records its kind."""

from __future__ import annotations

import hashlib
import json
import os
from os import PathLike
from pathlib import Path
from typing import Any

from alilama_core.base.errors import TokenizerError, UnknownPluginError
from alilama_core.base.files import atomic_write_text
from alilama_core.base.limits import loads_json
from alilama_core.contracts.tokenizer import KIND_FILE, Tokenizer
from alilama_core.engine.registry import get_registry, get_tokenizer


def save_tokenizer(tokenizer: Tokenizer, directory: str | PathLike[str], kind: str | None = None) -> Path:
    """``tokenizer.save(directory)``, then record its kind in ``alilama_tokenizer.json``.

    The kind recorded is the name the tokenizer is registered under, so that
    ``load_tokenizer`` finds it again: ``kind`` when given (it must be a
    registered tokenizer of which ``tokenizer`` is an instance), else the name
    the registry holds its class under, else its class's ``name``.
    """

    kind = recorded_kind(tokenizer, kind)
    directory = Path(directory)
    tokenizer.save(directory)
    atomic_write_text(directory / KIND_FILE, json.dumps({"kind": kind}) + "\n")
    return directory


def recorded_kind(tokenizer: Tokenizer, kind: str | None = None) -> str:
    """The kind ``save_tokenizer`` records for ``tokenizer``: a registered name that loads it back."""

    registry = get_registry()
    cls = type(tokenizer)
    if kind is not None:
        if not isinstance(kind, str) or not kind.strip():
            raise TokenizerError(f"kind must name a registered tokenizer (`alilama plugins`), got {kind!r}")
        registered = registry.get("tokenizer", kind)  # an unknown kind lists the registered ones
        if not (isinstance(registered, type) and isinstance(tokenizer, registered)):
            raise TokenizerError(
                f"tokenizer kind {kind!r} is registered for {getattr(registered, '__name__', registered)!r}, "
                f"but this tokenizer is a {cls.__name__}; a folder recording {kind!r} would not load it back"
            )
        return kind
    names = registry.names_of("tokenizer", cls)
    if len(names) == 1:
        return names[0]
    if tokenizer.name in names:
        return tokenizer.name
    if names:
        raise TokenizerError(
            f"{cls.__name__} is registered as {', '.join(map(repr, names))}; "
            f"pass kind=NAME to save_tokenizer to say which one to record"
        )
    if tokenizer.name:
        return tokenizer.name
    raise TokenizerError(
        f"cannot record the kind of a {cls.__name__}: it is not registered (register_tokenizers) and its class "
        f"sets no `name`; register it, or pass kind=NAME to save_tokenizer"
    )


def _read_meta(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; anything else is a ``TokenizerError`` naming the file."""
    try:
        meta = loads_json(path.read_text(encoding="utf-8"), TokenizerError, repr(str(path)))
    except TokenizerError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise TokenizerError(f"{str(path)!r} must hold a JSON object")
    return meta


def tokenizer_kind(directory: str | PathLike[str]) -> str:
    """The registry name of the tokenizer saved in ``directory``.

    Read from ``alilama_tokenizer.json``; folders written before it existed name
    their kind as ``name`` in ``tokenizer_config.json`` (or are ``bpe``).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise TokenizerError(f"{str(directory)!r} is not a tokenizer folder (written by `alilama tokenizer train`)")
    path = directory / KIND_FILE
    if path.is_file():  # written by save_tokenizer: it is the authority
        kind = _read_meta(path).get("kind")
        if not isinstance(kind, str) or not kind.strip():
            raise TokenizerError(
                f"{str(path)!r} exists but records no tokenizer kind (its 'kind' is {json.dumps(kind)}); "
                'it must name the registered tokenizer that wrote the folder, e.g. {"kind": "bpe"} '
                "(`alilama plugins` lists them): fix the file, or train the tokenizer again"
            )
        return kind
    path = directory / "tokenizer_config.json"
    if path.is_file():
        name = _read_meta(path).get("name")
        if isinstance(name, str) and name:
            return name
    if (directory / "tokenizer.model").is_file():
        return "bpe"
    raise TokenizerError(
        f"{str(directory)!r} holds no tokenizer ({KIND_FILE} is missing); train one with `alilama tokenizer train`"
    )


def load_tokenizer(directory: str | os.PathLike[str]):
    """Load a saved tokenizer folder with the plugin of the kind it records (see ``tokenizer_kind``)."""

    kind = tokenizer_kind(directory)
    try:
        cls = get_tokenizer(kind)
    except UnknownPluginError as exc:
        raise TokenizerError(
            f"the tokenizer folder {str(directory)!r} records kind {kind!r}, which no installed plugin registers "
            f"(registered tokenizers: {', '.join(exc.available) or 'none'}). Install the plugin that provides "
            f"{kind!r}, or, if the folder records the wrong kind, fix its alilama_tokenizer.json."
            + (f" Plugins that failed to load (one may provide it): {'; '.join(exc.failed)}." if exc.failed else "")
        ) from None
    return cls.load(directory)


def tokenizer_hash(directory: str | os.PathLike[str]) -> str:
    """SHA-256 over a tokenizer folder's files (names and contents)."""
    digest = hashlib.sha256()
    for file in sorted(Path(directory).iterdir()):
        if file.is_file() and not file.name.startswith("."):
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()
