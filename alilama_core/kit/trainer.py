"""The conformance kit for a trainer plugin."""

from __future__ import annotations

import copy
import dataclasses
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from alilama_core.contracts.attention import attention_backend
from alilama_core.base.errors import AlilamaError
from alilama_core.contracts.optimizer import OptimizerFactory
from alilama_core.contracts.task import parse_lengths
from alilama_core.contracts.trainer import SETTING_NAMES, SETTINGS, Trainer
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.model import build_model
from alilama_core.engine.registry import get_attention, get_trainer
from alilama_core.engine.validate import check_config
from alilama_core.kit.common import (
    Check,
    Subject,
    _fail,
    _refuses_unknown_option,
    _scope,
    _scoped,
    registered,
    run_checks,
)
from alilama_core.runs.checkpoint import FINAL, WEIGHTS, load_run, read_run_json
from alilama_core.runs.data import TokenData
from alilama_core.runs.tasks import get_task

SHORT_RUN = [
    "model.context_length=16",
    "train.max_steps=4",
    "train.batch_size=4",
    "train.warmup_steps=0",
    "train.grad_clip=null",
    "train.eval_every=2",
    "train.eval_tokens=256",
    "train.checkpoint_every=2",
    "train.log_every=1",
    "train.sample_tokens=4",
    "train.sample_every=1000",
    "train.device=cpu",
]
"""Four steps of a tiny model, checkpoints at 2 and 4; every setting of ``SETTINGS`` idle."""

NO_FINAL = "end fit() with the RunWriter's finish(model, state), which writes it (alilama_core.contracts.runs)"

PROBE = "conformance-probe"
"""The name of the kit's probe attention backend and probe optimizer (see the ``settings`` check)."""


def task_config(base: Any, *overrides: str) -> Any:
    """``base`` (a ``Config``) set up for the task ``copy`` at lengths 1-4, with ``SHORT_RUN`` and ``overrides``."""
    task = get_task("copy")
    lengths = "1-4"
    return cfgmod.apply_overrides(
        base,
        [
            *SHORT_RUN,
            f"model.vocab_size={len(task.vocabulary())}",
            f"model.context_length={task.sequence_length(parse_lengths(lengths)[1]) - 1}",
            "task.name=copy",
            f"task.lengths={lengths}",
            "task.val_examples=16",
            *overrides,
        ],
    )


def finished(out: Path) -> bool:
    """Whether the run folder ``out`` holds its final weights (``RunWriter.finish`` was called)."""
    return (out / FINAL / WEIGHTS).is_file()


def check_trainer(
    trainer: str | type,
    data_dir: str | Path,
    *,
    config: Any = None,
    exact_resume: bool = True,
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check a trainer (registered name or ``Trainer`` subclass) on a prepared data folder.

    Training to ``max_steps`` and writing ``final/``; stopping at a step,
    resuming to the end (with ``exact_resume``, to the very weights of an
    uninterrupted run) and a run folder that ``load_run`` loads; an algorithmic
    task trained through the same ``DataSource`` contract; the refusal to write
    over an existing run without ``overwrite``; clear errors for an unknown
    option and missing data; and the settings of ``contracts.trainer.SETTINGS``:
    each one the trainer does not declare in ``supports`` refused, and those it
    declares honoured where the kit can see it (see ``settings``).
    """
    checks = trainer_checks(trainer, data_dir, config=config, exact_resume=exact_resume, known_gaps=known_gaps)
    return run_checks(checks)


def trainer_checks(
    trainer: str | type,
    data_dir: str | Path,
    *,
    config: Any = None,
    exact_resume: bool = True,
    known_gaps: Mapping[str, str] | None = None,
) -> list[Check]:
    """The named checks of ``check_trainer``, one ``Check`` each (see ``parametrize_with_checks``)."""
    name, scope = _scope("trainer", trainer)
    what = f"trainer {name!r}"
    with scope():
        cls = get_trainer(name)
    data_dir = Path(data_dir)

    def settings() -> Any:
        vocab = TokenData(data_dir).meta["vocab_size"]
        overrides = [f"model.vocab_size={vocab}", *SHORT_RUN, f"train.trainer={name}"]
        return check_config(cfgmod.apply_overrides(config or cfgmod.preset("tiny"), overrides))

    def make(cfg: Any) -> Any:
        if not (isinstance(cls, type) and issubclass(cls, Trainer)):
            raise _fail(what, f"registered object {cls!r} is not a Trainer subclass")
        return cls(cfg, echo=lambda *a, **k: None, show_progress=False)

    def whole_run() -> tuple[Path, Any]:
        out = Path(subject.tmp.name) / "whole"
        return out, make(subject.cfg).fit(str(data_dir), str(out))

    subject = Subject(tmp=tempfile.TemporaryDirectory, cfg=settings, whole=whole_run)

    def fit() -> None:
        out, result = subject.whole
        if not isinstance(result, dict) or result.get("step") != 4:
            raise _fail(what, f"fit() must return a dict with step=4 (train.max_steps), got {result!r}")
        if not finished(out):
            raise _fail(what, f"fit() to train.max_steps wrote no {FINAL}/{WEIGHTS}: {NO_FINAL}")

    def stop_and_resume() -> None:
        whole, _ = subject.whole
        part = Path(subject.tmp.name) / "part"
        stopped = make(subject.cfg).fit(str(data_dir), str(part), stop_at=2)
        if stopped.get("step") != 2:
            raise _fail(what, f"fit(stop_at=2) must stop at step 2, got {stopped!r}")
        resumed = make(cfgmod.load(part / "config.yaml")).fit(str(data_dir), str(part), resume=True)
        if resumed.get("step") != 4:
            raise _fail(what, f"fit(resume=True) must continue to step 4, got {resumed!r}")
        a, b = load_run(whole, verify=False), load_run(part, verify=False)
        if exact_resume:
            for (k, va), vb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
                if not torch.equal(va, vb):
                    raise _fail(what, f"a run stopped at step 2 and resumed differs from an uninterrupted one ({k})")

    def task() -> None:
        cfg = task_config(cfgmod.preset("tiny"), f"train.trainer={name}")
        out = Path(subject.tmp.name) / "task"
        result = make(check_config(cfg)).fit("", str(out))  # a task run reads no data folder (as the CLI calls it)
        if not isinstance(result, dict) or result.get("step") != 4:
            raise _fail(what, f"fit() on the task 'copy' must return a dict with step=4, got {result!r}")
        if not finished(out):
            raise _fail(what, f"fit() on the task 'copy' wrote no {FINAL}/{WEIGHTS}: {NO_FINAL}")
        if read_run_json(out).get("task") != "copy" or load_run(out, verify=False).model.config.vocab_size != len(
            get_task("copy").vocabulary()
        ):
            raise _fail(what, "a run trained on the task 'copy' does not record it, or does not load back")

    def bad_input() -> None:
        whole, _ = subject.whole
        try:
            make(subject.cfg).fit(str(data_dir), str(whole))
        except AlilamaError:
            pass
        else:
            raise _fail(what, "fit() into an existing run without overwrite or resume must raise AlilamaError")
        tmp = Path(subject.tmp.name)
        try:
            make(subject.cfg).fit(str(tmp / "no-data"), str(tmp / "r"))
        except AlilamaError:
            pass
        else:
            raise _fail(what, "fit() on a missing data folder must raise AlilamaError")
        bad = cfgmod.apply_overrides(subject.cfg, ["train.trainer_options.no_such_option=1"])
        _refuses_unknown_option(what, lambda: make(bad), "train.trainer_options")

    def settings_honoured_or_refused() -> None:
        supports = frozenset(getattr(cls, "supports", ()))
        unknown = sorted(supports - SETTING_NAMES)
        if unknown:
            raise _fail(what, f"supports names {unknown}, which are not settings; they are: {sorted(SETTING_NAMES)}")
        for setting in SETTINGS:
            if setting.name not in supports:
                refused(setting.name, setting.probe, "it does not declare it in supports")
        if "device" in supports and not torch.cuda.is_available():
            refused("device", {"device": "cuda"}, "there is no CUDA GPU here")
        honoured(subject.cfg, supports)

    def refused(setting: str, probe: dict[str, Any], why: str) -> None:
        """A run with ``probe`` is refused with an ``AlilamaError`` naming ``train.<setting>``, writing nothing."""
        cfg = copy.deepcopy(subject.cfg)
        for key, value in probe.items():
            setattr(cfg.train, key, value)
        out = Path(subject.tmp.name) / f"refused-{setting}"
        given = ", ".join(f"train.{k}={v!r}" for k, v in probe.items())
        try:
            make(cfg).fit(str(data_dir), str(out))
        except AlilamaError as exc:
            if f"train.{setting}" not in str(exc):
                raise _fail(what, f"the error refusing {given} does not name train.{setting}: {exc}") from None
        else:
            raise _fail(
                what,
                f"{given} was silently ignored: it trained instead of refusing it ({why}). Honour it and list "
                f"{setting!r} in the trainer's supports, or leave it out of supports and call "
                "Trainer.__init__, which refuses it (alilama_core.contracts.trainer.SETTINGS)",
            )
        if out.exists():
            raise _fail(what, f"refusing {given} left {out} behind: refuse a setting before writing anything")

    def honoured(base: Any, supports: frozenset[str]) -> None:
        """Train 2 steps through the kit's probe attention backend (and probe optimizer) with every declared
        setting it can observe in use; check what the forward passes and optimiser steps saw."""
        seen: dict[str, Any] = {"forwards": [], "steps": [], "built": []}
        eager = attention_backend(get_attention("eager"))

        def probe_attention(q, k, v, **kw):
            if torch.is_grad_enabled():  # a training forward pass, not an evaluation or a sample
                seen["forwards"].append((q.shape[0], q.dtype, q.device.type, torch.get_num_threads()))
            return eager.fn(q, k, v, **kw)

        class ProbeSGD(torch.optim.SGD):
            @torch.no_grad()
            def step(self, closure=None):
                grads = [p.grad.double().norm() for g in self.param_groups for p in g["params"] if p.grad is not None]
                seen["steps"].append(float(torch.stack(grads).norm()) if grads else 0.0)
                return super().step(closure)

        class ProbeOptimizer(OptimizerFactory):
            def build(self, params):
                seen["built"].append(len(params.all))
                return ProbeSGD(params.all, lr=self.train.lr)

        threads = 1 if torch.get_num_threads() != 1 else None  # else the threads cannot be told apart
        cfg = copy.deepcopy(base)
        cfg.model.attention = PROBE
        cfg.train.max_steps, cfg.train.eval_every, cfg.train.checkpoint_every = 2, 2, 2
        probes = {
            "dtype": "bfloat16",
            "micro_batch_size": 2,
            "optimizer": PROBE,
            "grad_clip": 1e-3,
            "threads": threads,
        }
        for key, value in probes.items():
            if key in supports:
                setattr(cfg.train, key, value)
        t = cfg.train
        out = Path(subject.tmp.name) / "honoured"
        with (
            registered("attention", PROBE, dataclasses.replace(eager, name=PROBE, fn=probe_attention)),
            registered("optimizer", PROBE, ProbeOptimizer),
        ):
            make(copy.deepcopy(cfg)).fit(str(data_dir), str(out))  # what it was asked, whatever it does to it
            trainable = sum(p.requires_grad for p in build_model(cfg.model).parameters())
        forwards = seen["forwards"]
        if not forwards:
            raise _fail(
                what, "no training forward pass went through model.attention (build the model with build_model)"
            )
        expect = {  # setting: (what the probe saw, what it should have seen, what that is)
            "micro_batch_size" if "micro_batch_size" in supports else "batch_size": (
                0,
                t.micro_batch_size or t.batch_size,
                "the training forward passes took batches of",
            ),
            "dtype": (1, torch.bfloat16 if t.dtype == "bfloat16" else torch.float32, "attention's inputs were in"),
            "device": (2, "cpu", "the training forward passes ran on"),
        }
        if "threads" in supports and threads is not None:
            expect["threads"] = (3, threads, "torch's threads in the training forward passes were")
        for key, (index, want, meaning) in expect.items():
            got = sorted({f[index] for f in forwards}, key=str)
            if got != [want]:
                raise _fail(what, f"train.{key}={getattr(t, key)!r} is not honoured: {meaning} {got}, not {want} alone")
        if "optimizer" in supports:
            if seen["built"] != [trainable] or len(seen["steps"]) != t.max_steps:
                raise _fail(
                    what,
                    f"train.optimizer={PROBE!r} is not honoured: it was built {len(seen['built'])} time(s) for "
                    f"{seen['built']} parameters (the model has {trainable} trainable) and stepped "
                    f"{len(seen['steps'])} times in {t.max_steps} steps; build it with build_optimizer(model, "
                    "config.train) (alilama_core.engine.registry)",
                )
            if "grad_clip" in supports and max(seen["steps"]) > t.grad_clip * (1 + 1e-3):
                raise _fail(
                    what,
                    f"train.grad_clip={t.grad_clip} is not honoured: the optimiser saw gradient norms "
                    f"{[f'{n:.3g}' for n in seen['steps']]}; clip them before opt.step()",
                )

    plan: list[tuple[str, Callable[[], None]]] = [
        ("fit", fit),
        ("stop and resume", stop_and_resume),
        ("trains a task", task),
        ("bad input", bad_input),
        ("settings", settings_honoured_or_refused),
    ]
    return [Check("trainer", name, label, _scoped(scope, fn), gap=(known_gaps or {}).get(label)) for label, fn in plan]
