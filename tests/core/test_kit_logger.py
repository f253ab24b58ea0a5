"""``check_logger`` on a class that no plugin registers (as documented), and a failing check that says why."""

from __future__ import annotations

import pytest

from alilama_core.contracts.logger import Logger
from alilama_core.engine.registry import get_registry
from alilama_core.kit import check_logger


class Memory(Logger):
    """Keeps what it is given in memory."""

    def start(self, run):
        self.rows = []
        return {}

    def log_scalars(self, step, scalars):
        self.rows.append((step, scalars))

    def end(self, summary, stopped):
        pass


class NoState(Memory):
    def start(self, run):
        super().start(run)
        return None  # must be a dict


def test_an_unregistered_logger_class_is_checked_directly_and_left_unregistered():
    assert check_logger(Memory) == [
        "contract",
        "a whole run",
        "interrupted, resumed, evaluated",
        "close before start",
        "unknown options",
    ]
    assert not [n for n in get_registry().names("logger") if n.startswith("conformance-")]


def test_an_unregistered_logger_that_breaks_the_contract_fails_saying_why():
    with pytest.raises(AssertionError, match=r"logger 'conformance-nostate': start\(\) must return a dict"):
        check_logger(NoState)
