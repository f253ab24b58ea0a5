"""ALiBi with torch alone: the implementation of the ``alibi`` scheme, and the module its export ships.

``alilama_positional.alibi.ALiBi`` is this class plus Alilama's ``PositionalScheme``
contract, and ``ALiBi.export_source()`` names this file: the Hugging Face
export copies it beside the weights, where the remote code loads it as it
loads a plugin's standalone module. So it imports only torch and the standard
library (never Alilama).

Each head ``h`` adds ``-m_h * (i - j)`` to the score of query ``i`` on key ``j``
(Press, Smith & Lewis, 2022, arXiv:2108.12409). For ``n`` heads, ``n`` a power
of two, the slopes are ``m_h = 2^(-8h/n)``, ``h = 1..n``. For other ``n`` the
paper takes the slopes of the nearest smaller power of two ``p`` and adds every
other slope of ``2p`` heads, as BLOOM and MPT compute them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def alibi_slopes(n_heads: int) -> Tensor:
    """Per-head slopes, float32, shape ``(n_heads,)``.

    >>> alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    True
    >>> alibi_slopes(6).tolist() == [2.0 ** -k for k in (2, 4, 6, 8, 1, 3)]
    True
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be positive, got {n_heads}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(nn.Module):
    """The slopes are a non-persistent buffer (not in checkpoints), refilled by ``reset_parameters``."""

    kind = "bias"
    has_slopes = True
    max_positions = None

    def __init__(self, config) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.build()

    def build(self) -> None:
        """Create the buffers (``self.n_heads`` is set)."""
        self.register_buffer("_slopes", alibi_slopes(self.n_heads), persistent=False)

    def reset_parameters(self) -> None:
        self._slopes = alibi_slopes(self.n_heads).to(self._slopes.device)

    def slopes(self) -> Tensor:
        return self._slopes.float()  # (H,)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (T, S)
        return -self.slopes()[:, None, None] * distance  # (H, T, S)
