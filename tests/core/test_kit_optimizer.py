"""The optimizer plugin kind: the built-ins register through it, the trainer takes ``train.optimizer`` from the
registry, and ``check_optimizer`` passes them and fails optimisers that break the contract, saying why."""

from __future__ import annotations

import pytest
import torch

from alilama_core.base.errors import ConfigError, UnknownPluginError
from alilama_core.contracts.optimizer import OptimizerFactory
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.registry import get_registry, get_trainer
from alilama_core.kit import check_optimizer, optimizer_checks


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_the_built_in_optimizers_are_plugins_and_pass_the_kit(name):
    entry = get_registry().entry("optimizer", name)
    assert entry.distribution == "alilama" and entry.plugin == "trainers"  # an entry point, like a third party's
    assert check_optimizer(name) == [
        "contract",
        "follows the schedule's lr",
        "lowers the loss",
        "state_dict round trip",
        "a resumed run is bit-identical",
        "unknown options",
    ]


def test_an_unknown_optimizer_or_option_is_refused_before_training():
    default = get_trainer("default")
    cfg = cfgmod.apply_overrides(cfgmod.preset("tiny"), ["train.optimizer=lamb"])
    with pytest.raises(UnknownPluginError, match=r"unknown optimizer 'lamb'; available: .*adamw, .*muon"):
        default(cfg)
    cfg = cfgmod.apply_overrides(cfgmod.preset("tiny"), ["train.optimizer_options.beta3=0.5"])
    with pytest.raises(ConfigError, match="optimizer 'adamw' has no option.*'beta3'"):
        default(cfg)


class MatricesOnly(OptimizerFactory):
    """Forgets the biases and norms: they would never train."""

    def build(self, params):
        return torch.optim.AdamW(params.matrices, lr=self.train.lr)


class FixedLr(OptimizerFactory):
    """Keeps the learning rate it was built with, whatever the schedule sets."""

    def build(self, params):
        lr = self.train.lr

        class Fixed(torch.optim.SGD):
            def step(self, closure=None):
                for group in self.param_groups:
                    group["lr"] = lr
                return super().step(closure)

        return Fixed(params.all, lr=lr)


class Forgetful(OptimizerFactory):
    """Momentum that its state dict does not hold."""

    def build(self, params):
        class Momentum(torch.optim.SGD):
            def state_dict(self):
                return {"state": {}, "param_groups": super().state_dict()["param_groups"]}

        return Momentum(params.all, lr=self.train.lr, momentum=0.9)


@pytest.mark.parametrize(
    "factory, check, message",
    [
        (MatricesOnly, "contract", r"parameter 'blocks.0.ln_attn.weight' is in 0 param groups"),
        (FixedLr, "follows the schedule's lr", r"a step at lr 0 \(set_lr\(opt, 0.0\)\) changed"),
        (Forgetful, "state_dict round trip", "state_dict\\(\\) must hold all of its state"),
    ],
)
def test_the_kit_fails_an_optimizer_that_breaks_the_contract_saying_why(factory, check, message):
    checks = {c.name: c for c in optimizer_checks(factory)}
    with pytest.raises(AssertionError, match=message):
        checks[check]()
    checks["unknown options"]()  # the rest of its contract holds
