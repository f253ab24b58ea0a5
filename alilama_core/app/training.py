"""``alilama train`` around the trainer: what it trains (config, run folder, data), and the check after it.

``training_plan`` turns the command's options into the config, the run folder
and the data folder the trainer's ``fit`` is given: a new run's config from
``--config``/``--preset`` and overrides, a resumed run's own config, and for a
task run no data (its examples are generated). ``report_finished`` holds any
trainer, a third party's included, to the run-folder contract: a run it
returns from has its final weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alilama_core.app.common import console, resolve_config
from alilama_core.base.errors import AlilamaError


def training_plan(
    config: str | None,
    preset: str | None,
    overrides: list[str] | None,
    *,
    data: str | None = None,
    out: str | None = None,
    resume: str | None = None,
    task: str | None = None,
) -> tuple[Any, Path, str]:
    """``(config, run folder, data folder)`` for ``alilama train``; a data folder of ``""`` for a task run.

    With ``resume`` the run's own config, with ``overrides`` applied, and the data
    it recorded unless ``data`` is given; else a new run at ``out``. A data
    folder sets ``model.vocab_size`` of a new run to its tokenizer's (said on
    the console). Options that exclude each other raise ``AlilamaError``.
    """
    given_data = data
    if resume:
        from alilama_core.runs.checkpoint import resume_config

        run = Path(resume)
        if not (run / "config.yaml").is_file():
            raise AlilamaError(f"cannot resume: {resume!r} is not a run folder (no config.yaml)")
        if config or preset:
            raise AlilamaError("--resume uses the run's own config; give overrides only (e.g. train.max_steps=4000)")
        if out and Path(out).resolve() != run.resolve():
            raise AlilamaError("give either --out (a new run) or --resume (continue a run), not both")
        cfg, recorded = resume_config(run, overrides)
        data = data if data is not None else recorded
    else:
        if not out:
            raise AlilamaError("give --out RUN for a new run (or --resume RUN to continue one)")
        run = Path(out)
        cfg = resolve_config(config, preset, overrides)
    if task or cfg.task.name:  # generated examples: no prepared data
        from alilama_core.app.tasks import task_config

        if given_data is not None:
            raise AlilamaError(
                f"--data {given_data!r} and --task {task or cfg.task.name!r} exclude each other: a task run trains "
                "on generated examples, never on prepared data. Drop --data, or drop --task (and task.name) "
                "to train on the data"
            )
        return task_config(cfg, task, bool(resume), overrides), run, ""
    if not data:
        raise AlilamaError("give --data DIR (a folder written by `alilama data prepare`), or --task NAME")
    from alilama_core.runs.data import TokenData

    vocab = TokenData(data).meta["vocab_size"]
    if not resume and cfg.model.vocab_size != vocab:
        console.print(f"model.vocab_size set to the tokenizer's {vocab}", highlight=False)
        cfg.model.vocab_size = vocab
    return cfg, run, data


def report_finished(run: Path, cfg: Any, result: dict) -> None:
    """After ``fit``: refuse a run left without its final weights; print the summary unless the trainer did.

    ``result`` is what ``fit`` returned: ``finished`` when the trainer printed its
    own summary, else ``step`` and, when it evaluated, ``val_loss`` and ``val_bpb``.
    """
    from alilama_core.runs.checkpoint import FINAL, WEIGHTS

    if not (run / FINAL / WEIGHTS).is_file():  # a finished run has its final weights, whoever trained it
        raise AlilamaError(
            f"trainer {cfg.train.trainer!r} returned at step {result.get('step')} without writing "
            f"{run / FINAL / WEIGHTS}, so the run is not finished. The trainer must end fit() with its "
            "RunWriter's finish(model, state) (alilama_core.contracts.runs); alilama_core.kit.check_trainer "
            "checks this"
        )
    if result.get("finished"):
        return
    summary = f"done: step {result['step']}"
    if result.get("val_bpb") is not None:
        summary += f", val loss {result['val_loss']:.4f}, val bpb {result['val_bpb']:.4f}"
    console.print(f"{summary}; run folder {run}", highlight=False)
