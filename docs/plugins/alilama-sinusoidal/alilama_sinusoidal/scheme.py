"""Fixed sinusoidal absolute positions (Vaswani et al., 2017, section 3.5).

``PE[p, 2i] = sin(p / 10000^(2i/C))`` and ``PE[p, 2i+1] = cos(...)``, computed
for any position, so unlike a learned table there is no upper limit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from alilama_core import ConfigError, PositionalScheme


class Sinusoidal(PositionalScheme):
    kind = "embedding"

    def __init__(self, config) -> None:
        super().__init__(config)
        if self.d_model % 2:
            raise ConfigError(f"sinusoidal positions need an even model.d_model, got {self.d_model}")
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> Tensor:
        return 1.0 / (10000.0 ** (torch.arange(0, self.d_model, 2, dtype=torch.float32) / self.d_model))

    def reset_parameters(self) -> None:
        self.inv_freq = self._inv_freq().to(self.inv_freq.device)

    def embed(self, positions: Tensor) -> Tensor:
        angles = positions.float()[..., None] * self.inv_freq  # (T, C/2) or (B, T, C/2)
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (..., C/2, 2)
        return pe.flatten(-2)  # (T, C) or (B, T, C), sin and cos interleaved
