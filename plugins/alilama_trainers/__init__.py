"""The built-in trainer, registered as a plugin like any other."""

from alilama_core.contracts.hookspecs import hookimpl


@hookimpl
def register_trainers(register):
    register(
        "default",
        "alilama_trainers.trainer:DefaultTrainer",
        description="AdamW, warm-up + cosine, clipping, accumulation; one process or DDP under torchrun",
    )
