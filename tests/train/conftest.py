"""A small corpus, tokenizer and prepared data shared by the training tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from alilama_core.app.prepare import prepare
from alilama_core.engine.registry import get_tokenizer


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    from alilama_core.runs.stories import write_corpus

    path = tmp_path_factory.mktemp("corpus") / "stories.txt"
    write_corpus(path, 400, seed=1)
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(corpus, tmp_path_factory) -> Path:
    from alilama_core.app.prepare import iter_documents

    out = tmp_path_factory.mktemp("tok")
    tok = get_tokenizer("bpe").train(iter_documents([str(corpus)]), 320, special_tokens=["<|endoftext|>"])
    tok.save(out)
    return out


@pytest.fixture(scope="session")
def data_dir(corpus, tokenizer_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "prepared"
    prepare([str(corpus)], tokenizer_dir, out, val_fraction=0.1)
    return out
