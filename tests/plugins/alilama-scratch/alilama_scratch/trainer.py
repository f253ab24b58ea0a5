"""``scratch``: the registry's optimizer, warm-up then constant or cosine learning rate, clipping, one process on
the CPU; not a subclass of the default trainer.

The run folder is written through ``RunFolder`` (the core's ``RunWriter``), the
batches come from a ``DataSource``, the optimiser from ``build_optimizer``: the
loop below is all this trainer owns. It declares the settings it honours in
``supports``; the base ``Trainer`` refuses any other that a config uses (bf16,
micro-batches, a time budget, ...).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from alilama_core.base.errors import ConfigError
from alilama_core.contracts.optimizer import set_lr
from alilama_core.contracts.trainer import Trainer
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import build_optimizer
from alilama_core.runs.sources import open_data_source
from alilama_core.runs.writer import RunFolder


class ScratchTrainer(Trainer):
    name = "scratch"
    defaults: ClassVar[dict[str, Any]] = {"schedule": "cosine"}
    supports = frozenset({"optimizer", "grad_clip", "warmup_steps"})

    def lr(self, step: int) -> float:
        t = self.config.train
        warm = min(1.0, (step + 1) / t.warmup_steps) if t.warmup_steps else 1.0
        if self.options["schedule"] == "constant":
            return t.lr * warm
        return warm * (t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + math.cos(math.pi * step / t.max_steps)))

    def fit(self, data_dir, out_dir, resume=False, overwrite=False, stop_at=None) -> dict[str, Any]:
        if self.options["schedule"] not in ("constant", "cosine"):
            raise ConfigError(f"trainer_options.schedule must be constant or cosine, not {self.options['schedule']!r}")
        cfg = self.config.validate()
        t, run = cfg.train, RunFolder(out_dir, cfg, self.name, echo=self.echo)
        run.precheck(data_dir, resume=resume, overwrite=overwrite)
        with run.held():
            data = open_data_source(cfg, data_dir)
            torch.manual_seed(t.seed)
            model = build_model(cfg.model)
            opt = build_optimizer(model, t)
            rng = np.random.default_rng(t.seed)
            state = run.begin(data, model, opt, resume=resume, overwrite=overwrite)
            if run.finished is not None:
                return run.finished
            step, tokens, best = 0, 0, {"val_loss": None, "step": None}
            if state is not None:
                step, tokens, best = state["step"], state["tokens"], state["best"]
                rng.bit_generator.state = state["sampler"]
            metrics: dict[str, float] = {}
            saved = {"step": step, "tokens": tokens, "best": best, "sampler": rng.bit_generator.state}
            model.train()
            while step < t.max_steps:
                set_lr(opt, lr := self.lr(step))
                x, y = data.batch(rng, t.batch_size)
                loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten()) * data.loss_weight(y)
                loss.backward()
                if t.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
                opt.step()
                opt.zero_grad(set_to_none=True)
                step, tokens = step + 1, tokens + t.batch_size * cfg.model.context_length
                row = {"step": step, "tokens": tokens, "lr": lr, "train_loss": loss.item()}
                if step % t.eval_every == 0 or step == t.max_steps:
                    row.update(metrics := data.evaluate(model))
                    if best["val_loss"] is None or metrics["val_loss"] < best["val_loss"]:
                        best = {"val_loss": metrics["val_loss"], "step": step}
                run.log(row)
                saved = {"step": step, "tokens": tokens, "best": best, "sampler": rng.bit_generator.state}
                stopping = stop_at is not None and step >= stop_at and step < t.max_steps
                if step % t.checkpoint_every == 0 or stopping or step == t.max_steps:
                    run.save_checkpoint(step, model, opt, saved)
                    run.prune(best["step"])
                if stopping:
                    return {"step": step, "interrupted": f"stopped at step {stop_at} (--stop-at)", **metrics}
            run.finish(model, saved)
            return {"step": step, "tokens": tokens, **(metrics or data.evaluate(model))}
