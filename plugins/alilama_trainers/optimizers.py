"""The built-in optimizers, ``adamw`` and ``muon``, registered as plugins like any other (``contracts.optimizer``)."""

from __future__ import annotations

import torch

from alilama_core.contracts.optimizer import LR_SCALE, ModelParameters, OptimizerFactory


def adamw(params: ModelParameters, t) -> torch.optim.AdamW:
    """AdamW at ``t.lr`` with ``t.beta1``/``beta2``; weight decay on the matrices, none on biases and norms."""
    return torch.optim.AdamW(params.decay_groups(t.weight_decay), lr=t.lr, betas=(t.beta1, t.beta2))


class AdamW(OptimizerFactory):
    __doc__ = adamw.__doc__
    name = "adamw"

    def build(self, params: ModelParameters) -> torch.optim.AdamW:
        return adamw(params, self.train)


class Muon(OptimizerFactory):
    """Muon for the blocks' matrices at ``train.muon_lr`` (momentum ``train.muon_momentum``), AdamW for the rest."""

    name = "muon"

    def build(self, params: ModelParameters) -> TwoOptimizers:
        t = self.train
        hidden = params.hidden_matrices
        muon = torch.optim.Muon(hidden, lr=t.muon_lr, momentum=t.muon_momentum, weight_decay=t.weight_decay)
        return TwoOptimizers(muon, adamw(params.without(hidden), t), scale=t.muon_lr / t.lr)


class TwoOptimizers:
    """Muon for matrices beside AdamW for the rest, stepped, zeroed, saved and restored as one optimiser.

    ``param_groups`` lists both optimisers' groups; Muon's carry ``lr_scale`` (``muon_lr / lr``), so the
    schedule sets each group's ``lr`` to ``lr_scale`` times its own value (``contracts.optimizer.set_lr``).
    """

    def __init__(self, muon: torch.optim.Optimizer, adamw: torch.optim.Optimizer, scale: float) -> None:
        self.muon, self.adamw = muon, adamw
        for group in muon.param_groups:
            group[LR_SCALE] = scale

    @property
    def param_groups(self) -> list[dict]:
        return [*self.muon.param_groups, *self.adamw.param_groups]

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if set(state) != {"muon", "adamw"}:
            raise ValueError("this checkpoint's optimiser state is not Muon + AdamW (train.optimizer changed?)")
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])
