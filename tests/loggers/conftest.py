"""The training tests' corpus, tokenizer and prepared data, and the trackers read back with their own readers."""

from __future__ import annotations

from train.conftest import corpus, data_dir, tokenizer_dir  # noqa: F401 - shared session fixtures
