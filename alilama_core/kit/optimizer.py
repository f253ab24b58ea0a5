"""The conformance kit for an optimizer plugin (``contracts.optimizer``, ``train.optimizer``)."""

from __future__ import annotations

import copy
import io
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from alilama_core.contracts.config import TrainConfig
from alilama_core.contracts.optimizer import ModelParameters, OptimizerFactory, set_lr
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_registry, get_trainer
from alilama_core.engine.validate import check_config
from alilama_core.kit.common import (
    Check,
    Subject,
    _fail,
    _refuses_unknown_option,
    _scope,
    _scoped,
    run_checks,
    tiny_model_config,
)
from alilama_core.kit.trainer import task_config
from alilama_core.runs.checkpoint import load_run

STEPS = 20
"""Steps on one fixed batch in which the loss must fall by ``LOSS_DROP``."""
LOSS_DROP = 0.1
MEMBERS = ("param_groups", "step", "zero_grad", "state_dict", "load_state_dict")
"""What trainers and the run writer use of an optimiser."""


def check_optimizer(
    optimizer: str | type,
    *,
    options: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check an optimizer (registered name or ``OptimizerFactory`` subclass) against its contract; the checks run.

    Checked on a tiny model: what it builds has the five members trainers use,
    with every trainable parameter in exactly one param group; it follows the
    learning rate the schedule sets (``set_lr``: at 0 a step changes nothing);
    it lowers the loss on a fixed batch; its ``state_dict`` survives a
    checkpoint's ``torch.save``/``torch.load(weights_only=True)`` and, loaded
    into a fresh optimiser, continues bit-identically; a run of the default
    trainer stopped and resumed ends on the very weights of an uninterrupted
    one; and an unknown option is refused. ``options`` are its
    ``train.optimizer_options``; ``train`` other ``TrainConfig`` fields for the
    runs (e.g. ``{"lr": 1e-3}``)::

        def test_lion():
            check_optimizer("lion", options={"beta2": 0.98})
    """
    return run_checks(optimizer_checks(optimizer, options=options, train=train, known_gaps=known_gaps))


def optimizer_checks(
    optimizer: str | type,
    *,
    options: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    known_gaps: Mapping[str, str] | None = None,
) -> list[Check]:
    """The named checks of ``check_optimizer``, one ``Check`` each (see ``parametrize_with_checks``)."""
    name, scope = _scope("optimizer", optimizer)
    what = f"optimizer {name!r}"

    def settings(**changes: Any) -> TrainConfig:
        return TrainConfig(**{"optimizer": name, "optimizer_options": dict(options or {}), **(train or {}), **changes})

    def factory() -> type[OptimizerFactory]:  # built inside a check, where the name is registered already
        target = get_registry().get("optimizer", name)
        if not (isinstance(target, type) and issubclass(target, OptimizerFactory)):
            raise _fail(what, f"registered object {target!r} is not an OptimizerFactory subclass")
        if not isinstance(target.defaults, dict):
            raise _fail(what, f"defaults must be a dict of settings, got {target.defaults!r}")
        return target

    def model_and_optimizer(seed: int = 0) -> tuple[torch.nn.Module, Any]:
        torch.manual_seed(seed)
        model = build_model(tiny_model_config())
        t = settings()
        return model, subject.factory(t).build(ModelParameters.of(model))

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, 61, (4, 17), generator=torch.Generator().manual_seed(0))
        return tokens[:, :-1], tokens[:, 1:]

    def train_step(model: torch.nn.Module, opt: Any, lr: float) -> float:
        x, y = batch()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        set_lr(opt, lr)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in model.state_dict().items()}

    subject = Subject(tmp=tempfile.TemporaryDirectory, factory=factory)

    def contract() -> None:
        model, opt = model_and_optimizer()
        missing = [m for m in MEMBERS if not hasattr(opt, m)]
        if missing:
            raise _fail(what, f"build() returned {type(opt).__name__}, which lacks {', '.join(missing)}")
        held: dict[int, int] = {}
        for group in opt.param_groups:
            if not isinstance(group, dict) or "lr" not in group or "params" not in group:
                raise _fail(what, "every param group must be a dict with 'params' and 'lr' (the schedule sets it)")
            for p in group["params"]:
                held[id(p)] = held.get(id(p), 0) + 1
        for n, p in ModelParameters.of(model).named:
            if held.get(id(p), 0) != 1:
                raise _fail(
                    what,
                    f"parameter {n!r} is in {held.get(id(p), 0)} param groups; every trainable parameter "
                    "must be in exactly one (ModelParameters.all, or its splits)",
                )

    def follows_lr() -> None:
        model, opt = model_and_optimizer()
        before = weights(model)
        train_step(model, opt, 0.0)
        moved = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
        if moved:
            raise _fail(
                what,
                f"a step at lr 0 (set_lr(opt, 0.0)) changed {moved[:3]}: read each param group's 'lr' at every "
                "step (the trainer's schedule sets it), times its lr_scale",
            )
        train_step(model, opt, settings().lr)
        if all(torch.equal(v, before[k]) for k, v in model.state_dict().items()):
            raise _fail(what, f"a step at lr {settings().lr} changed no weight")

    def lowers_the_loss() -> None:
        model, opt = model_and_optimizer()
        lr = settings().lr
        losses = [train_step(model, opt, lr) for _ in range(STEPS)]
        if not losses[-1] < (1 - LOSS_DROP) * losses[0]:
            raise _fail(
                what,
                f"{STEPS} steps at lr {lr} on one fixed batch took the loss from {losses[0]:.4f} to {losses[-1]:.4f}, "
                f"not {LOSS_DROP:.0%} lower (pass train={{'lr': ...}} to check it at another learning rate)",
            )

    def round_trip() -> None:
        model, opt = model_and_optimizer()
        lr = settings().lr
        for _ in range(3):
            train_step(model, opt, lr)
        saved = io.BytesIO()
        torch.save(opt.state_dict(), saved)
        saved.seek(0)
        try:
            state = torch.load(saved, weights_only=True)  # as a checkpoint's optimizer.pt is read
        except Exception as exc:
            raise _fail(
                what, f"state_dict() must hold tensors and plain data only (weights_only=True): {exc}"
            ) from None
        again, fresh = model_and_optimizer(seed=1)
        again.load_state_dict(model.state_dict())
        fresh.load_state_dict(state)
        for _ in range(3):
            train_step(model, opt, lr)
            train_step(again, fresh, lr)
        for k, v in model.state_dict().items():
            if not torch.equal(v, again.state_dict()[k]):
                raise _fail(
                    what,
                    f"an optimiser restored from state_dict() continues differently from the original ({k}): "
                    "state_dict() must hold all of its state, and load_state_dict() restore it",
                )

    def resumed_run() -> None:
        base = task_config(cfgmod.preset("tiny"), "train.trainer=default", f"train.optimizer={name}")
        base.train.optimizer_options = dict(options or {})
        for key, value in (train or {}).items():
            setattr(base.train, key, value)
        cfg = check_config(base)
        tmp = Path(subject.tmp.name)
        trainer = get_trainer("default")

        def fit(out: Path, config: Any, **kw: Any) -> dict:
            return trainer(copy.deepcopy(config), echo=lambda *a, **k: None, show_progress=False).fit(
                "", str(out), **kw
            )

        fit(tmp / "whole", cfg)
        fit(tmp / "part", cfg, stop_at=2)
        fit(tmp / "part", cfgmod.load(tmp / "part" / "config.yaml"), resume=True)
        a, b = load_run(tmp / "whole", verify=False).model, load_run(tmp / "part", verify=False).model
        for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
            if not torch.equal(va, vb):
                raise _fail(what, f"a run stopped at step 2 and resumed differs from an uninterrupted one ({k})")

    def unknown_options() -> None:
        bad = settings(optimizer_options={**(options or {}), "no_such_option": 1})
        _refuses_unknown_option(what, lambda: subject.factory(bad), "train.optimizer_options")

    plan: list[tuple[str, Callable[[], None]]] = [
        ("contract", contract),
        ("follows the schedule's lr", follows_lr),
        ("lowers the loss", lowers_the_loss),
        ("state_dict round trip", round_trip),
        ("a resumed run is bit-identical", resumed_run),
        ("unknown options", unknown_options),
    ]
    return [
        Check("optimizer", name, label, _scoped(scope, fn), gap=(known_gaps or {}).get(label)) for label, fn in plan
    ]
