"""RoPE with torch alone: the implementation of the ``rope`` scheme, and the module its export ships.

``alilama_positional.rope.RoPE`` is this class plus Alilama's ``PositionalScheme``
contract (and its option checks); ``RoPE.export_source()`` names this file,
which the Hugging Face export copies beside the weights. So it imports only
torch and the standard library (never Alilama).

Rotary position embeddings (Su et al., 2021, arXiv:2104.09864): q and k are
rotated by an angle proportional to their absolute position, so their dot
product depends only on the distance. Pairs are formed GPT-NeoX style (first
half with second half of the head dimension).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def rope_inv_freq(head_dim: int, theta: float) -> Tensor:
    """Rotation frequencies ``theta^(-2i/D)``, float32, shape ``(D/2,)``."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    return 1.0 / (theta**exponent)  # (D/2,)


class RoPE(nn.Module):
    """``inv_freq`` is a non-persistent buffer (not in checkpoints), refilled by ``reset_parameters``."""

    kind = "rotary"
    max_positions = None
    defaults = {"theta": 10000.0}
    """``theta``: the base of the rotation frequencies (``config.positional_options``)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.head_dim = config.d_model // config.n_heads
        self.options = {**self.defaults, **(getattr(config, "positional_options", None) or {})}
        self.build()

    def build(self) -> None:
        """Create the buffers (``self.head_dim`` and ``self.options`` are set)."""
        self.theta = float(self.options["theta"])
        self.register_buffer("inv_freq", rope_inv_freq(self.head_dim, self.theta), persistent=False)

    def reset_parameters(self) -> None:
        self.inv_freq = rope_inv_freq(self.head_dim, self.theta).to(self.inv_freq.device)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate ``x`` ``(B, H, T, D)`` for ``(T,)`` or per-row ``(B, T)`` positions."""
        angles = positions.float()[..., None] * self.inv_freq.float()  # (T, D/2) or (B, T, D/2)
        if angles.dim() == 3:
            angles = angles[:, None]  # (B, 1, T, D/2): the same rotation for every head
        cos, sin = angles.cos(), angles.sin()
        x1, x2 = x.float().chunk(2, dim=-1)  # (B, H, T, D/2) each
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (B, H, T, D)
        return rotated.to(x.dtype)
