"""KERPLE-log with torch alone: the copy an exported Hugging Face model runs (imports no Alilama)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class KerpleLog(nn.Module):
    """``bias[h, i, j] = -r1[h] * log(1 + r2[h] * (i - j))``; r1, r2 > 0 through softplus."""

    kind = "bias"
    has_slopes = False
    max_positions = None

    def __init__(self, config) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.raw_r1 = nn.Parameter(torch.zeros(self.n_heads))
        self.raw_r2 = nn.Parameter(torch.zeros(self.n_heads))

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return kerple_log(q_pos, k_pos, self.raw_r1, self.raw_r2)

    def slopes(self):
        return None


def kerple_log(q_pos: Tensor, k_pos: Tensor, raw_r1: Tensor, raw_r2: Tensor) -> Tensor:
    distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()  # (T, S); future keys are masked anyway
    r1 = F.softplus(raw_r1.float())[:, None, None]  # (H, 1, 1)
    r2 = F.softplus(raw_r2.float())[:, None, None]  # (H, 1, 1)
    return -r1 * torch.log1p(r2 * distance)  # (H, T, S)
