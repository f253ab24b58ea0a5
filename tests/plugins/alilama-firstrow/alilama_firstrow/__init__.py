"""Registers ``rope-first-row``: RoPE with a batching bug (every row turned by row 0's positions)."""

from alilama_core import hookimpl


@hookimpl
def register_positional_schemes(register):
    register("rope-first-row", "alilama_firstrow.scheme:FirstRowRoPE", description="RoPE, row 0's positions for all")
