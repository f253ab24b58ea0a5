"""Learned absolute positions (as in GPT-2): a table of ``context_length`` vectors."""

from __future__ import annotations

from torch import Tensor, nn

from alilama_core.interfaces import PositionalScheme


class LearnedPositions(PositionalScheme):
    kind = "embedding"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.table = nn.Embedding(config.context_length, config.d_model)

    @property
    def max_positions(self) -> int:
        return self.table.num_embeddings

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table.weight, std=0.02)

    def embed(self, positions: Tensor) -> Tensor:
        return self.table(positions)  # (T, C) or (B, T, C)
