"""What training data is: the ``DataSource`` contract, and the token dtype rule."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

IGNORE_INDEX = -100
"""The target id of a position the loss does not score (a task's prompt, padding)."""


def token_dtype(vocab_size: int) -> np.dtype:
    """The dtype of token files: uint16 while ids fit, else uint32 (numpy only when a file is written or read)."""
    import numpy as np

    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


@runtime_checkable
class DataSource(Protocol):
    """What a trainer trains on: prepared text (``runs.data.TokenData``) or a task (``runs.tasks.TaskData``).

    A trainer never asks which one it has. One optimiser step::

        items = source.draw(rng, batch_size)          # the global batch, from the trainer's own rng
        x, y = source.collate(items[i:j])             # int64 (b, T) tensors; y is -100 where unscored
        loss = cross_entropy(model(x), y) * source.loss_weight(y)   # the global batch's mean when summed

    ``draw`` consumes only ``rng`` (whose state a checkpoint keeps, so a resumed
    run draws what it would have drawn); slicing its result shares the batch
    between processes and micro-batches. ``batch(rng, n)`` is both at once.
    """

    vocab_size: int
    tokenizer_dir: Path
    """A tokenizer folder, copied into the run folder."""
    meta: dict[str, Any]
    """At least ``tokenizer_hash`` and ``vocab_size``."""
    writes_samples: bool
    """Whether text samples from ``train.sample_prompts`` make sense for this data."""

    def draw(self, rng: np.random.Generator, n: int) -> Sequence[Any]: ...

    def collate(self, items: Sequence[Any]) -> tuple[Any, Any]: ...

    def loss_weight(self, y: Any) -> float: ...

    def batch(self, rng: np.random.Generator, n: int, device: Any = "cpu") -> tuple[Any, Any]: ...

    def evaluate(self, model: Any) -> dict[str, float]:
        """Validation metrics: ``val_loss`` (nats per scored token) and ``val_bpb`` at least."""
        ...

    def describe(self) -> dict[str, Any]:
        """What run.json records of the data: ``data``, ``task``, ``data_meta``."""
        ...

    def inputs(self) -> list[Path]:
        """Folders a new run folder must not replace or sit inside (``outputs.check_output``)."""
        ...
