"""Registers ``chunked``: attention computed a block of queries at a time, for any bias scheme."""

from alilama_core import hookimpl


@hookimpl
def register_attention_backends(register):
    register("chunked", "alilama_chunked.backend:backend")
