"""Fixed sinusoidal absolute positions (Vaswani et al., 2017, section 3.5).

``PE[p, 2i] = sin(p / 10000^(2i/C))`` and ``PE[p, 2i+1] = cos(...)``, computed
for any position, so unlike a learned table there is no upper limit.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from alilama_core import ConfigError, PositionalScheme
from alilama_sinusoidal import standalone


class Sinusoidal(PositionalScheme):
    kind = "embedding"

    def __init__(self, config) -> None:
        super().__init__(config)
        if self.d_model % 2:
            raise ConfigError(f"sinusoidal positions need an even model.d_model, got {self.d_model}")
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> Tensor:
        return standalone.inv_freq(self.d_model)

    def reset_parameters(self) -> None:
        self.inv_freq = self._inv_freq().to(self.inv_freq.device)

    def embed(self, positions: Tensor) -> Tensor:
        return standalone.embed(positions, self.inv_freq)  # (T, C) or (B, T, C)

    @classmethod
    def export_source(cls) -> str:
        """The torch-only module that a Hugging Face export of this scheme runs (``standalone.py``)."""
        return str(Path(standalone.__file__).resolve())
