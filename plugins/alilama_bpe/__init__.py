"""Byte-level BPE tokenizer plugin for Alilama (``bpe``).

A thin Python layer (:mod:`alilama_bpe.tokenizer`) over a native C++ trainer and
encoder (``alilama_bpe._native``), with a pure-Python reference
(:mod:`alilama_bpe.reference`) that defines the semantics and serves as the
fallback (``ALILAMA_BPE_PUREPYTHON=1`` forces it). Importing this module is
cheap: the tokenizer and the CLI are loaded on first use.
"""

from alilama_core.hookspecs import hookimpl

__all__ = ["register_tokenizers", "register_commands"]


@hookimpl
def register_tokenizers(register):
    register("bpe", "alilama_bpe.tokenizer:BPETokenizer")


@hookimpl
def register_commands(app):
    from alilama_bpe.cli import tokenizer_app

    app.add_typer(tokenizer_app, name="tokenizer")
