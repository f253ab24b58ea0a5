"""ALiBi: attention with linear biases (Press, Smith & Lewis, 2022, arXiv:2108.12409).

Each head ``h`` adds ``-m_h * (i - j)`` to the score of query ``i`` on key ``j``.
For ``n`` heads, ``n`` a power of two, the slopes are ``m_h = 2^(-8h/n)``,
``h = 1..n``. For other ``n`` the paper takes the slopes of the nearest smaller
power of two ``p`` and adds every other slope of ``2p`` heads, as BLOOM and MPT
compute them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from alilama_core.interfaces import PositionalScheme


def alibi_slopes(n_heads: int) -> Tensor:
    """Per-head slopes, float32, shape ``(n_heads,)``.

    >>> alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    True
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be positive, got {n_heads}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(PositionalScheme):
    kind = "bias"
    has_slopes = True

    def __init__(self, config) -> None:
        super().__init__(config)
        self.register_buffer("_slopes", alibi_slopes(self.n_heads), persistent=False)

    def reset_parameters(self) -> None:
        # Non-persistent buffers are not in checkpoints: refill them on (re)initialisation.
        self._slopes = alibi_slopes(self.n_heads).to(self._slopes.device)

    def slopes(self) -> Tensor:
        return self._slopes.float()  # (H,)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
        return -self.slopes()[:, None, None] * distance  # (H, T, S)
