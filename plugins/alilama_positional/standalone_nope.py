"""NoPE with torch alone: the ``nope`` scheme's implementation and exported module (nothing to compute).

No positional information; the causal mask alone orders the tokens
(Kazemnejad et al., 2023, arXiv:2305.19466). ``NoPositions.export_source()``
names this file, which the Hugging Face export copies beside the weights.
"""

from __future__ import annotations

from torch import nn


class NoPositions(nn.Module):
    kind = "none"
    max_positions = None

    def __init__(self, config) -> None:
        super().__init__()
