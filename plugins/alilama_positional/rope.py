"""RoPE: rotary position embeddings (Su et al., 2021, arXiv:2104.09864).

q and k are rotated by an angle proportional to their absolute position, so
their dot product depends only on the distance. Pairs are formed GPT-NeoX style
(first half with second half of the head dimension).
"""

from __future__ import annotations

import torch
from torch import Tensor

from alilama_core.errors import ConfigError
from alilama_core.interfaces import PositionalScheme


class RoPE(PositionalScheme):
    kind = "rotary"
    defaults = {"theta": 10000.0}
    """``theta``: the base of the rotation frequencies (``model.positional_options``)."""

    @classmethod
    def check_options(cls, options, name: str = ""):
        """``defaults`` with ``options`` applied; ``theta`` must be a finite number above 1."""
        import math

        checked = super().check_options(options, name)
        theta = checked["theta"]
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 1:
            raise ConfigError(
                f"model.positional_options.theta must be a finite number above 1 (the base of RoPE's "
                f"rotation frequencies), got {theta!r}; e.g. model.positional_options.theta=10000"
            )
        return checked

    def __init__(self, config) -> None:
        super().__init__(config)
        if self.head_dim % 2:
            raise ConfigError(
                f"rope needs an even head dimension; d_model/n_heads = {self.head_dim}. "
                "Change model.d_model or model.n_heads."
            )
        self.theta = float(self.options["theta"])
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> Tensor:
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim
        return 1.0 / (self.theta**exponent)  # (D/2,)

    def reset_parameters(self) -> None:
        self.inv_freq = self._inv_freq().to(self.inv_freq.device)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        angles = positions.float()[..., None] * self.inv_freq.float()  # (T, D/2) or (B, T, D/2)
        if angles.dim() == 3:
            angles = angles[:, None]  # (B, 1, T, D/2): the same rotation for every head
        cos, sin = angles.cos(), angles.sin()
        x1, x2 = x.float().chunk(2, dim=-1)  # (B, H, T, D/2) each
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (B, H, T, D)
        return rotated.to(x.dtype)
