"""Registers ``lion``: ``train.optimizer=lion`` (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms")."""

from alilama_core.contracts.hookspecs import hookimpl


@hookimpl
def register_optimizers(register):
    register("lion", "alilama_lion.lion:LionFactory", description="Lion: the sign of an interpolated momentum")
