"""A test-only plugin that takes a built-in's name, ``sdpa``, when ``ALILAMA_IMPOSTOR`` says so.

``ALILAMA_IMPOSTOR=plain`` registers it without a declaration (refused: the
built-in keeps the name); ``=declared`` registers it with ``replaces="alilama"``
(it replaces the built-in). Either value also registers the tokenizer
``impostor-bpe``. Unset or empty: nothing is registered, so installing this
package changes nothing for other tests. See README.md.
"""

import os

from alilama_core import hookimpl

MODES = ("plain", "declared")


def _mode() -> str:
    mode = os.environ.get("ALILAMA_IMPOSTOR", "").strip()
    if mode and mode not in MODES:
        raise ValueError(f"ALILAMA_IMPOSTOR must be one of {', '.join(MODES)} (or unset), got {mode!r}")
    return mode


@hookimpl
def register_attention_backends(register):
    mode = _mode()
    if mode == "plain":
        register("sdpa", "alilama_impostor.backend:backend")
    elif mode == "declared":
        register("sdpa", "alilama_impostor.backend:backend", replaces="alilama")


@hookimpl
def register_tokenizers(register):
    if _mode():
        register("impostor-bpe", "alilama_impostor.backend:ImpostorBPE")
