"""What an optimizer plugin is: the ``OptimizerFactory`` contract (``train.optimizer``).

``train.optimizer`` names a registered factory and ``train.optimizer_options``
holds its own settings, checked against its ``defaults``. A trainer builds the
optimiser it steps through the registry, so a third party's optimiser is used
exactly as the built-in ``adamw`` and ``muon`` are::

    from alilama_core.engine.registry import build_optimizer

    opt = build_optimizer(model, config.train)        # train.optimizer, with train.optimizer_options
    for step in range(config.train.max_steps):
        set_lr(opt, schedule(step))                   # each group: the schedule's lr times its lr_scale
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        writer.save_checkpoint(step, model, opt, state)   # keeps opt.state_dict(); a resume loads it back

What ``build`` returns is a ``torch.optim.Optimizer``, or an object with the
five members trainers and the run writer use: ``param_groups`` (a list of
dicts with ``lr``), ``step()``, ``zero_grad(set_to_none=True)``,
``state_dict()`` and ``load_state_dict(state)`` (``muon`` is two optimisers
stepped as one). Its state dict holds tensors and plain data only (checkpoints
are read with ``weights_only=True``), and loading it restores the optimiser
exactly, so a resumed run is bit-identical to an uninterrupted one.
``alilama_core.kit.check_optimizer`` checks all of this.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from alilama_core.base.errors import PluginUnavailableError
from alilama_core.base.options import check_options

LR_SCALE = "lr_scale"
"""A param group's key: its learning rate is the schedule's times this (default 1), see ``set_lr``."""


@dataclass(frozen=True, eq=False)
class ModelParameters:
    """A model's trainable parameters by name, in the model's order (a tied weight once).

    The usual splits are here once, so every optimiser splits alike: ``matrices``
    (two or more dimensions: the embedding, the blocks' weights, an untied head)
    take weight decay, ``vectors`` (biases, norm gains) do not, and
    ``hidden_matrices`` are the blocks' 2-D weights (Muon's share).
    """

    named: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, model: Any) -> ModelParameters:
        return cls(tuple((n, p) for n, p in model.named_parameters() if p.requires_grad))

    @property
    def all(self) -> list[Any]:
        return [p for _, p in self.named]

    @property
    def matrices(self) -> list[Any]:
        return [p for _, p in self.named if p.dim() >= 2]

    @property
    def vectors(self) -> list[Any]:
        return [p for _, p in self.named if p.dim() < 2]

    @property
    def hidden_matrices(self) -> list[Any]:
        return [p for n, p in self.named if p.dim() == 2 and n.startswith("blocks.")]

    def without(self, params: Iterable[Any]) -> ModelParameters:
        """These parameters less ``params`` (what is left for a second optimiser)."""
        taken = {id(p) for p in params}
        return ModelParameters(tuple((n, p) for n, p in self.named if id(p) not in taken))

    def decay_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """Two param groups: the matrices with ``weight_decay``, the vectors with none."""
        return [{"params": self.matrices, "weight_decay": weight_decay}, {"params": self.vectors, "weight_decay": 0.0}]


def set_lr(optimizer: Any, lr: float) -> None:
    """Set each param group's learning rate to ``lr`` times its ``lr_scale`` (a trainer's schedule, each step)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get(LR_SCALE, 1.0)


class OptimizerFactory(abc.ABC):
    """Builds the optimiser a trainer steps, for a model's ``ModelParameters``::

        class LionFactory(OptimizerFactory):
            defaults = {"beta1": 0.9, "beta2": 0.99}

            def build(self, params):
                t, o = self.train, self.options
                return Lion(params.decay_groups(t.weight_decay), lr=t.lr, betas=(o["beta1"], o["beta2"]))

    ``self.train`` is the ``TrainConfig`` (``lr``, ``weight_decay``, ...);
    ``self.options`` its ``optimizer_options`` checked against ``defaults``.
    The trainer's schedule sets every group's ``lr`` each step (``set_lr``): a
    group that should run at another rate than ``train.lr`` carries ``lr_scale``.
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    """The optimiser's own settings and their defaults; ``train.optimizer_options`` sets them."""

    def __init__(self, train: Any) -> None:
        self.train = train
        self.options: dict[str, Any] = self.check_options(train.optimizer_options, train.optimizer)

    @classmethod
    def check_options(cls, options: dict[str, Any] | None, name: str = "") -> dict[str, Any]:
        """``defaults`` with ``options`` applied; an unknown key raises ``ConfigError``."""
        return check_options("optimizer", name or cls.name or cls.__name__, cls.defaults, options)

    @abc.abstractmethod
    def build(self, params: ModelParameters) -> Any:
        """The optimiser for ``params`` (see the module's docstring for what it must offer)."""


def optimizer_factory(target: Any, name: str) -> type[OptimizerFactory]:
    """``target`` (a registered object) as an ``OptimizerFactory`` subclass; a clear error otherwise."""
    if not (isinstance(target, type) and issubclass(target, OptimizerFactory)):
        raise PluginUnavailableError(
            f"optimizer {name!r} is registered as {target!r}, which is not an OptimizerFactory subclass "
            "(alilama_core.contracts.optimizer)"
        )
    return target
