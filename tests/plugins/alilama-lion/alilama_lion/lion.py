"""Lion: each step moves every weight by ``lr`` times the sign of a momentum, with decoupled weight decay."""

import torch

from alilama_core.contracts.optimizer import OptimizerFactory


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else torch.enable_grad()(closure)()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in (p for p in group["params"] if p.grad is not None):
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(torch.sign(m.lerp(p.grad, 1 - beta1)), alpha=-group["lr"])
                m.lerp_(p.grad, 1 - beta2)
        return loss


class LionFactory(OptimizerFactory):
    defaults = {"beta1": 0.9, "beta2": 0.99}

    def build(self, params):
        t, o = self.train, self.options
        return Lion(params.decay_groups(t.weight_decay), lr=t.lr, betas=(o["beta1"], o["beta2"]))
