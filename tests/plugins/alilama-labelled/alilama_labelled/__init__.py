"""Registers ``labelled``: the default trainer, plus a label file written into every run it trains."""

from alilama_core import hookimpl


@hookimpl
def register_trainers(register):
    register("labelled", "alilama_labelled.trainer:LabelledTrainer")
