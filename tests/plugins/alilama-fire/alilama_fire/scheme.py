"""FIRE (Li et al., 2023, arXiv:2310.04418): ``bias[h, i, j] = f(psi(i - j) / psi(max(i, L)))[h]``.

``psi(x) = log(1 + c x)`` and ``f`` is a small MLP with one output per head.
Dividing by ``psi`` of the query's own position ``i`` (at least the threshold
``L``) makes the bias depend on where the query is, not only on ``i - j``.
Alilama computes a bias once for a whole batch from the batch's columns, so in
a left-padded batch this bias is not what each row gets alone: the scheme
breaks the bias contract on purpose. Below ``L`` positions it is a function of
``i - j``, so a kit that probed only a dozen tokens passed it; the conformance
kit's ``positions per row`` and ``padded batch == alone`` checks fail it
(tests/plugins/test_batched_positions.py).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from alilama_core import PositionalScheme


class Fire(PositionalScheme):
    kind = "bias"
    defaults = {"hidden": 32, "threshold": 32, "c": 1.0}
    """``hidden``: the MLP's width; ``threshold``: ``L``; ``c``: the scale inside ``psi``."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.mlp = nn.Sequential(
            nn.Linear(1, self.options["hidden"]), nn.ReLU(), nn.Linear(self.options["hidden"], self.n_heads)
        )

    def reset_parameters(self) -> None:
        self.mlp[0].reset_parameters()
        self.mlp[2].reset_parameters()

    def psi(self, x: Tensor) -> Tensor:
        return torch.log1p(self.options["c"] * x)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).clamp(min=0).float()  # (T, S); future keys are masked
        scale = self.psi(q_pos.float().clamp(min=self.options["threshold"]))[:, None]  # (T, 1): the query's position
        return self.mlp((self.psi(distance) / scale)[..., None]).permute(2, 0, 1)  # (H, T, S)
