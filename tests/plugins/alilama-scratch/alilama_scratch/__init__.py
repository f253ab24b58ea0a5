"""Registers ``scratch``: a trainer written from scratch on the contracts, ``RunWriter`` and ``DataSource``."""

from alilama_core.contracts.hookspecs import hookimpl


@hookimpl
def register_trainers(register):
    register("scratch", "alilama_scratch.trainer:ScratchTrainer", description="plain AdamW, one process")
