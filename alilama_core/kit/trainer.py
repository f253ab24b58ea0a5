"""The conformance kit for a trainer plugin."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from alilama_core.contracts.errors import AlilamaError
from alilama_core.contracts.task import parse_lengths
from alilama_core.contracts.trainer import Trainer
from alilama_core.engine import configs as cfgmod
from alilama_core.engine.registry import get_trainer
from alilama_core.engine.validate import check_config
from alilama_core.kit.common import Check, Subject, _fail, _refuses_unknown_option, _scope, _scoped, run_checks
from alilama_core.runs.checkpoint import load_run, read_run_json
from alilama_core.runs.data import TokenData
from alilama_core.runs.tasks import get_task

SHORT_RUN = [
    "model.context_length=16",
    "train.max_steps=4",
    "train.batch_size=4",
    "train.warmup_steps=1",
    "train.eval_every=2",
    "train.eval_tokens=256",
    "train.checkpoint_every=2",
    "train.log_every=1",
    "train.sample_tokens=4",
    "train.sample_every=1000",
    "train.device=cpu",
]
"""Four steps of a tiny model, checkpoints at 2 and 4."""


def check_trainer(
    trainer: str | type,
    data_dir: str | Path,
    *,
    config: Any = None,
    exact_resume: bool = True,
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check a trainer (registered name or ``Trainer`` subclass) on a prepared data folder.

    Training to ``max_steps``; stopping at a step, resuming to the end (with
    ``exact_resume``, to the very weights of an uninterrupted run) and a run
    folder that ``load_run`` loads; an algorithmic task trained through the
    same ``DataSource`` contract; the refusal to write over an existing run
    without ``overwrite``; and clear errors for an unknown option and missing data.
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
        _, result = subject.whole
        if not isinstance(result, dict) or result.get("step") != 4:
            raise _fail(what, f"fit() must return a dict with step=4 (train.max_steps), got {result!r}")

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
        copy = get_task("copy")
        lengths = "1-4"
        cfg = cfgmod.apply_overrides(
            cfgmod.preset("tiny"),
            [
                *SHORT_RUN,
                f"model.vocab_size={len(copy.vocabulary())}",
                f"model.context_length={copy.sequence_length(parse_lengths(lengths)[1]) - 1}",
                "task.name=copy",
                f"task.lengths={lengths}",
                "task.val_examples=16",
                f"train.trainer={name}",
            ],
        )
        out = Path(subject.tmp.name) / "task"
        result = make(check_config(cfg)).fit("", str(out))  # a task run reads no data folder (as the CLI calls it)
        if not isinstance(result, dict) or result.get("step") != 4:
            raise _fail(what, f"fit() on the task 'copy' must return a dict with step=4, got {result!r}")
        if read_run_json(out).get("task") != "copy" or load_run(out, verify=False).model.config.vocab_size != len(
            copy.vocabulary()
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

    plan: list[tuple[str, Callable[[], None]]] = [
        ("fit", fit),
        ("stop and resume", stop_and_resume),
        ("trains a task", task),
        ("bad input", bad_input),
    ]
    return [Check("trainer", name, label, _scoped(scope, fn), gap=(known_gaps or {}).get(label)) for label, fn in plan]
