"""The conformance kit for a tokenizer plugin."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alilama_core.base.errors import TokenizerError
from alilama_core.contracts.tokenizer import Tokenizer
from alilama_core.engine.registry import get_registry, get_tokenizer
from alilama_core.kit.common import (
    TRICKY_TEXTS,
    Check,
    Subject,
    _fail,
    _refuses_unknown_option,
    _scope,
    _scoped,
    run_checks,
)
from alilama_core.runs.tokenizers import load_tokenizer, save_tokenizer


def check_tokenizer(
    tokenizer: str | type,
    *,
    vocab_size: int = 300,
    texts: Sequence[str] | None = None,
    options: dict[str, Any] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check a tokenizer (registered name or ``Tokenizer`` subclass) against its contract.

    Training with a special token, exact round trips of tricky strings,
    ``encode_batch`` and ``encode_file`` equal to ``encode``, special tokens and
    ``eot_id``, ``decode_bytes``, ``describe``, save and load through the folder's
    recorded kind, the optional Hugging Face export when declared, the importer
    when one is registered, and clear errors for an unknown option and a folder
    that holds no tokenizer.
    """
    return run_checks(
        tokenizer_checks(tokenizer, vocab_size=vocab_size, texts=texts, options=options, known_gaps=known_gaps)
    )


def tokenizer_checks(
    tokenizer: str | type,
    *,
    vocab_size: int = 300,
    texts: Sequence[str] | None = None,
    options: dict[str, Any] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[Check]:
    """The named checks of ``check_tokenizer``, one ``Check`` each (see ``parametrize_with_checks``)."""
    import numpy as np

    name, scope = _scope("tokenizer", tokenizer)
    what = f"tokenizer {name!r}"
    with scope():
        cls = get_tokenizer(name)
    corpus = list(
        texts
        or [
            "Once upon a time, there was a little girl named Lily. She loved to play outside. " * 3,
            "One day, a little dog saw a big red ball in the park and barked: woof, woof! " * 3,
            *TRICKY_TEXTS,
        ]
    )

    def train():
        if not (isinstance(cls, type) and issubclass(cls, Tokenizer)):
            raise _fail(what, f"registered object {cls!r} is not a Tokenizer subclass")
        return cls.train(corpus, vocab_size, special_tokens=["<|endoftext|>"], **cls.check_options(options))

    subject = Subject(tok=train)

    def trained() -> None:
        tok = subject.tok
        if not isinstance(tok, cls):
            raise _fail(what, f"train() returned {type(tok).__name__}, not {cls.__name__}")
        if not 0 < tok.vocab_size <= vocab_size:
            raise _fail(what, f"vocab_size {tok.vocab_size} is outside 1..{vocab_size} (the requested size)")
        eot = tok.special_tokens.get("<|endoftext|>")
        if eot is None or tok.eot_id != eot or not 0 <= eot < tok.vocab_size:
            raise _fail(
                what, f"the special token <|endoftext|> must get an id below vocab_size; got {tok.special_tokens}"
            )

    def round_trips() -> None:
        tok = subject.tok
        for text in TRICKY_TEXTS:
            ids = tok.encode(text)
            if any(not isinstance(i, int) or not 0 <= i < tok.vocab_size for i in ids):
                raise _fail(what, f"encode({text!r}) gave ids outside 0..vocab_size-1 or not int: {ids[:10]}")
            if tok.decode(ids) != text:
                raise _fail(what, f"decode(encode({text!r})) gave {tok.decode(ids)!r}")
            if tok.decode_bytes(ids) != text.encode("utf-8"):
                raise _fail(what, f"decode_bytes(encode({text!r})) is not its UTF-8")

    def special_tokens() -> None:
        tok = subject.tok
        if tok.encode_batch(list(TRICKY_TEXTS)) != [tok.encode(t) for t in TRICKY_TEXTS]:
            raise _fail(what, "encode_batch(texts) differs from [encode(t) for t in texts]")
        marked = "a story<|endoftext|>another"
        ids = tok.encode(marked, allowed_special="all")
        if tok.eot_id not in ids or tok.decode(ids) != marked:
            raise _fail(what, "encode(..., allowed_special='all') must encode <|endoftext|> as its id and decode back")
        try:
            tok.encode(marked)
        except TokenizerError:
            pass
        else:
            raise _fail(what, "encode() of text holding a special token must raise TokenizerError by default")

    def encode_file() -> None:
        tok = subject.tok
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "text.txt"
            path.write_text("\n".join(corpus[:2]) + "<|endoftext|>" + TRICKY_TEXTS[4], encoding="utf-8")
            got = tok.encode_file(path)
            want = tok.encode(path.read_text(encoding="utf-8"), allowed_special="all")
            if not isinstance(got, np.ndarray) or got.ndim != 1 or got.tolist() != want:
                raise _fail(
                    what, "encode_file(path) must be a 1-D numpy array equal to encode(text, allowed_special='all')"
                )

    def save_and_load() -> None:
        tok = subject.tok
        with tempfile.TemporaryDirectory() as tmp:
            folder = save_tokenizer(tok, Path(tmp) / "tok")
            loaded = load_tokenizer(folder)
        if type(loaded) is not cls or loaded.encode(corpus[0]) != tok.encode(corpus[0]):
            raise _fail(what, "a saved folder does not load back (through its recorded kind) to the same tokenizer")
        if loaded.special_tokens != tok.special_tokens or loaded.vocab_size != tok.vocab_size:
            raise _fail(what, "special tokens or vocab_size change after save and load")
        facts = tok.describe()
        json.dumps(facts)
        if facts.get("kind") != name and facts.get("kind") != cls.name:
            raise _fail(what, f"describe() must name its kind, got {facts.get('kind')!r}")

    def save_hf() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            written = Path(subject.tok.save_hf(Path(tmp) / "hf"))
            if not written.is_file():
                raise _fail(what, "hf_export is declared but save_hf() wrote no file")

    def importer() -> None:
        from alilama_core.engine.registry import get_tokenizer_importer

        read = get_tokenizer_importer(name)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                read(Path(tmp) / "no-such-vocabulary")
            except TokenizerError:
                pass
            else:
                raise _fail(what, "the importer accepted a source that does not exist (it must raise TokenizerError)")
            if not declares_hf:
                return
            tok = subject.tok
            imported, where = read(tok.save_hf(Path(tmp) / "hf"))
        if not isinstance(imported, cls) or not (isinstance(where, str) and where):
            raise _fail(
                what,
                f"the importer must return ({cls.__name__}, a line saying what was read), got "
                f"({type(imported).__name__}, {where!r})",
            )
        for text in [corpus[0], *TRICKY_TEXTS]:
            if imported.encode(text) != tok.encode(text):
                raise _fail(what, f"the tokenizer.json save_hf writes imports back with other ids for {text!r}")
        if imported.special_tokens != tok.special_tokens:
            raise _fail(what, "the tokenizer.json save_hf writes imports back with other special tokens")

    def bad_input() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                cls.load(Path(tmp))
            except TokenizerError:
                pass
            else:
                raise _fail(what, "load() of an empty folder must raise TokenizerError")
        _refuses_unknown_option(what, lambda: cls.check_options({"no_such_option": 1}), "the training options")

    declares_hf = isinstance(cls, type) and bool(getattr(cls, "hf_export", False))
    with scope():
        imports = get_registry().entry("tokenizer", name).meta.get("importer") is not None
    plan = [
        ("train", trained, None),
        ("round trips", round_trips, None),
        ("special tokens", special_tokens, None),
        ("encode_file", encode_file, None),
        ("save and load", save_and_load, None),
        ("save_hf", save_hf, None if declares_hf else "it does not declare hf_export"),
        ("importer", importer, None if imports else "it registers no importer"),
        ("bad input", bad_input, None),
    ]
    return [
        Check("tokenizer", name, label, _scoped(scope, fn), skip=skip, gap=(known_gaps or {}).get(label))
        for label, fn, skip in plan
    ]
