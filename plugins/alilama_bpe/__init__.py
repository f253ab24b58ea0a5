"""Byte-level BPE tokenizer plugin for Alilama (``bpe``).

A thin Python layer (:mod:`alilama_bpe.tokenizer`) over a native C++ trainer and
encoder (``alilama_bpe._native``), with a pure-Python reference
(:mod:`alilama_bpe.reference`) that defines the semantics and serves as the
fallback (``ALILAMA_BPE_PUREPYTHON=1`` forces it). Importing this module is
cheap: the tokenizer is loaded on first use. ``alilama tokenizer`` (in the
application) drives it through the ``Tokenizer`` interface like any other, and
``alilama tokenizer import`` through the importer it registers beside it
(:func:`alilama_bpe.importers.import_tokenizer`).
"""

from alilama_core.contracts.hookspecs import hookimpl

__all__ = ["register_tokenizers"]


@hookimpl
def register_tokenizers(register):
    register("bpe", "alilama_bpe.tokenizer:BPETokenizer", importer="alilama_bpe.importers:import_tokenizer")
