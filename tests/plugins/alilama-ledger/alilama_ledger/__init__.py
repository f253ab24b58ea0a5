"""Registers the logger ``ledger``: every call of the Logger contract as one JSON line in ``ledger.jsonl``."""

from alilama_core import hookimpl


@hookimpl
def register_loggers(register):
    register("ledger", "alilama_ledger.logger:LedgerLogger", description="one JSON line per logger call")
