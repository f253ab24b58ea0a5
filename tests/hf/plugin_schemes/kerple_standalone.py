"""KERPLE-log with torch alone: the standalone module an export of the test scheme ships."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class KerpleLog(nn.Module):
    """``-r1[h] * log(1 + r2[h] * (i - j))``, ``r1`` and ``r2`` trainable per head."""

    kind = "bias"
    max_positions = None

    def __init__(self, config) -> None:
        super().__init__()
        self.r1 = nn.Parameter(torch.ones(config.n_heads))
        self.r2 = nn.Parameter(torch.ones(config.n_heads))

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()  # (T, S)
        return -self.r1[:, None, None] * torch.log1p(self.r2[:, None, None] * distance)  # (H, T, S)

    def slopes(self) -> None:
        return None  # not ALiBi-shaped
