"""Fixtures of the viz tests: a tokenizer and run folders, one per positional scheme."""

from __future__ import annotations

from pathlib import Path

import pytest
from viz.viz_helpers import STORY, build_run


@pytest.fixture(scope="session")
def tokenizer():
    from alilama_bpe.tokenizer import BPETokenizer

    return BPETokenizer.train([STORY * 3], vocab_size=300, special_tokens=["<|endoftext|>"])


@pytest.fixture(scope="session")
def run_factory(tmp_path_factory, tokenizer):
    """``run_factory(scheme)``: a run folder per scheme, built once per session."""
    root = tmp_path_factory.mktemp("viz-runs")
    made: dict[str, Path] = {}

    def make(positional: str) -> Path:
        if positional not in made:
            made[positional] = build_run(root, positional, tokenizer)
        return made[positional]

    return make
