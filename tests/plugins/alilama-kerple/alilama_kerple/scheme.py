"""KERPLE-log (Chi et al., 2022): ``-r1[h] * log(1 + r2[h] * (i - j))`` with r1, r2 trained per head.

Written from docs/plugins.md: a bias scheme whose parameters require grad, so
the core recomputes its bias once per forward pass and shares it with all
layers (never stale). ``model.positional_options`` sets the initial values.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from alilama_core import PositionalScheme
from alilama_kerple.standalone import kerple_log


def _inverse_softplus(y: float) -> float:
    return math.log(math.expm1(y))


class KerpleLog(PositionalScheme):
    kind = "bias"
    defaults = {"r1": 1.0, "r2": 1.0}
    """Initial values of r1 and r2 (both > 0) for every head."""

    def __init__(self, config) -> None:
        super().__init__(config)
        for key in ("r1", "r2"):
            if not float(self.options[key]) > 0:
                from alilama_core import ConfigError

                raise ConfigError(f"kerple-log option {key} must be > 0, got {self.options[key]!r}")
        self.raw_r1 = torch.nn.Parameter(torch.empty(self.n_heads))
        self.raw_r2 = torch.nn.Parameter(torch.empty(self.n_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.raw_r1.fill_(_inverse_softplus(float(self.options["r1"])))
            self.raw_r2.fill_(_inverse_softplus(float(self.options["r2"])))

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return kerple_log(q_pos, k_pos, self.raw_r1, self.raw_r2)  # (H, T, S)

    @classmethod
    def export_source(cls) -> str:
        return str(Path(__file__).with_name("standalone.py"))
