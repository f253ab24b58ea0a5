"""The built-in trainer and optimizers, registered as plugins like any other."""

from alilama_core.contracts.hookspecs import hookimpl


@hookimpl
def register_trainers(register):
    register(
        "default",
        "alilama_trainers.trainer:DefaultTrainer",
        description="warm-up + cosine or WSD, clipping, accumulation, bf16, compile; one process or DDP under torchrun",
    )


@hookimpl
def register_optimizers(register):
    register("adamw", "alilama_trainers.optimizers:AdamW", description="AdamW, weight decay on matrices only")
    register(
        "muon",
        "alilama_trainers.optimizers:Muon",
        description="Muon for the blocks' matrices (train.muon_lr), AdamW for the rest",
    )
