"""Registers ``window``: sliding-window attention, which declares ``exact=False``."""

from alilama_core import hookimpl


@hookimpl
def register_attention_backends(register):
    register("window", "alilama_window.backend:backend")
