"""Learned absolute positions with torch alone: the ``learned`` scheme's implementation and exported module.

``alilama_positional.learned.LearnedPositions`` is this class plus Alilama's
``PositionalScheme`` contract; ``LearnedPositions.export_source()`` names this
file, which the Hugging Face export copies beside the weights. So it imports
only torch (never Alilama).

As in GPT-2: a table of ``context_length`` vectors added to the token embeddings.
"""

from __future__ import annotations

from torch import Tensor, nn


class LearnedPositions(nn.Module):
    kind = "embedding"

    def __init__(self, config) -> None:
        super().__init__()
        self.build(config)

    def build(self, config) -> None:
        """Create the table, ``(context_length, d_model)``."""
        self.table = nn.Embedding(config.context_length, config.d_model)

    @property
    def max_positions(self) -> int:
        return self.table.num_embeddings

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table.weight, std=0.02)

    def embed(self, positions: Tensor) -> Tensor:
        return self.table(positions)  # (T, C) or (B, T, C)
