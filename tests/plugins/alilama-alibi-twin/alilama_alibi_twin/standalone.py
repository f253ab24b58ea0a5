"""The twin's maths with torch alone: the standalone module a remote-code export ships."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def twin_slopes(n_heads: int) -> Tensor:
    """``2^(-8h/p)`` for ``p`` the nearest power of two at or below ``n_heads``, then every other slope of ``2p``."""
    p = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * h / p) for h in range(1, p + 1)]
    slopes += [2.0 ** (-8.0 * h / (2 * p)) for h in range(1, 2 * p + 1)][0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


class AlibiTwin(nn.Module):
    kind = "bias"
    has_slopes = True
    max_positions = None

    def __init__(self, config) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.register_buffer("_slopes", twin_slopes(self.n_heads), persistent=False)

    def reset_parameters(self) -> None:
        self._slopes = twin_slopes(self.n_heads).to(self._slopes.device)

    def slopes(self) -> Tensor:
        return self._slopes.float()  # (H,)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
        return -self.slopes()[:, None, None] * distance  # (H, T, S)


class AlibiUndeclared(AlibiTwin):
    pass
