"""Sinusoidal positions with torch alone: the copy an exported Hugging Face model runs.

``alilama export hf`` copies this file beside the exported modeling code
(``Sinusoidal.export_source()`` names it); it must not import Alilama.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Sinusoidal(nn.Module):
    """``PE[p, 2i] = sin(p / 10000^(2i/C))``, ``PE[p, 2i+1] = cos(...)``, added to the token embeddings."""

    kind = "embedding"
    max_positions = None

    def __init__(self, config) -> None:
        super().__init__()
        self.d_model = config.d_model
        self.register_buffer("inv_freq", inv_freq(self.d_model), persistent=False)

    def embed(self, positions: Tensor) -> Tensor:
        return embed(positions, self.inv_freq)


def inv_freq(d_model: int) -> Tensor:
    return 1.0 / (10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model))  # (C/2,)


def embed(positions: Tensor, inv_freq: Tensor) -> Tensor:
    angles = positions.float()[..., None] * inv_freq  # (T, C/2) or (B, T, C/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (..., C/2, 2)
    return pe.flatten(-2)  # (T, C) or (B, T, C), sin and cos interleaved
