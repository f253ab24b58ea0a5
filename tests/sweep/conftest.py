"""Tiny prepared data for the sweep tests (the same corpus and tokenizer size as tests/train)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every Ray process of these tests (the test's own cluster and the sweeps' local instances) stays on
# loopback: Ray's single-machine switch keeps it off the machine's network address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from alilama_core.app.prepare import iter_documents, prepare
from alilama_core.engine.registry import get_tokenizer


@pytest.fixture(scope="session")
def sweep_data(tmp_path_factory) -> Path:
    from alilama_core.runs.stories import write_corpus

    root = tmp_path_factory.mktemp("sweep-data")
    corpus = root / "stories.txt"
    write_corpus(corpus, 400, seed=1)
    tok = get_tokenizer("bpe").train(iter_documents([str(corpus)]), 320, special_tokens=["<|endoftext|>"])
    tok.save(root / "tok")
    prepare([str(corpus)], root / "tok", root / "data", val_fraction=0.1)
    return root / "data"
