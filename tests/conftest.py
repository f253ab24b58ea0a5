"""Shared fixtures: paths to the repository and to the shared data (which may be absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ALILAMA_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (DATA / "tinystories" / "train.txt").is_file():
        pytest.skip(f"shared data not found at {DATA} (set ALILAMA_DATA to the data folder)")
    return DATA
