"""The test-only plugins (tests/plugins/alilama-*), for the tests and benchmarks alone.

``make test`` installs them into ``build/test-plugins``, never into the
environment a user runs Alilama from. This puts that folder on ``sys.path`` and
on the ``PYTHONPATH`` of every process a test starts, so their entry points load
there and only there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TEST_PLUGINS = Path(__file__).resolve().parent / "build" / "test-plugins"

if TEST_PLUGINS.is_dir() and str(TEST_PLUGINS) not in sys.path:
    sys.path.append(str(TEST_PLUGINS))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(TEST_PLUGINS)]))

# The fast and the full tier, and the guard that keeps the fast one fast (tests/alilama_tiers.py).
pytest_plugins = ["alilama_tiers"]

# `alilama train` and `quickstart` end by building the run's compiled decode step (30-160 s); the suite's runs,
# in this process and in the commands it starts, skip it unless a test asks for it (--build-decode).
os.environ.setdefault("ALILAMA_BUILD_DECODE", "0")
