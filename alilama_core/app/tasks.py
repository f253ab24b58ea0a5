"""Algorithmic tasks on the command line: ``alilama tasks list``, and the task parts of train, eval and plot.

``alilama train --task copy task.lengths=1-16`` trains on generated examples (no
``data prepare``); ``alilama eval RUN --lengths 8,16,32,64`` scores it on fixed,
seeded test sets and keeps the scores in ``RUN/task-eval.json``;
``alilama plot RUN... --accuracy`` draws exact match against length.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from alilama_core.app.common import JsonOpt, console, help_examples
from alilama_core.base.errors import AlilamaError
from alilama_core.base.files import atomic_open, atomic_write_text

EVAL_FILE = "task-eval.json"

tasks_app = typer.Typer(
    help="Algorithmic tasks (copy, sort, addition, ...) to train and test models on.",
    no_args_is_help=True,
    epilog=help_examples("alilama tasks list", "alilama train --task sort --out runs/sort task.lengths=1-8"),
)


@tasks_app.command("list", epilog=help_examples("alilama tasks list", "alilama tasks list --json"))
def tasks_list(as_json: JsonOpt = False) -> None:
    """List registered tasks: name, plugin, options and an example."""
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    rows = []
    for name in reg.names("task"):
        entry = reg.entry("task", name)
        row = {
            "name": name,
            "plugin": entry.plugin,
            "distribution": entry.distribution,
            "description": entry.meta.get("description", ""),
            "options": {},
            "example": "",
        }
        try:
            task = reg.get("task", name)()
            prompt, answer = telling_example(task, name, min(EXAMPLE_LENGTH, task.max_length or EXAMPLE_LENGTH))
            row.update(
                options=dict(task.options),
                example=f"{''.join(prompt)}={''.join(answer)}",
                vocabulary=len(task.vocabulary()),
            )
        except Exception as exc:  # noqa: BLE001 (a broken task is listed with its error, never fatal)
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(title="Alilama tasks")
    for col in ("task", "plugin", f"example (length {EXAMPLE_LENGTH})", "options", "description"):
        table.add_column(col)
    for r in rows:
        options = ", ".join(f"{k}={v}" for k, v in r["options"].items())
        table.add_row(r["name"], r["plugin"], r.get("error") or r["example"], options, r["description"])
    console.print(table, markup=False, highlight=False)


EXAMPLE_LENGTH = 4
EXAMPLE_TRIES = 32
"""Examples ``telling_example`` draws at most before it settles for the best so far."""


def telling_example(task, name: str, length: int) -> tuple[list[str], list[str]]:
    """An example of ``task`` that shows what it does: ``(prompt, answer)``.

    Drawn from a generator seeded by the task's name, so that tasks which draw alike (sort and
    reverse) show different prompts, each always the same one. Of up to ``EXAMPLE_TRIES`` draws it
    keeps the first whose answer differs from the prompt and from the prompt backwards (a sort that
    is no reversal); failing that, one whose answer differs from the prompt (reverse: no palindrome).
    """
    import zlib

    import numpy as np

    rng = np.random.default_rng(zlib.crc32(name.encode("utf-8")))
    best, best_score = None, (False, False)
    for _ in range(EXAMPLE_TRIES):
        prompt, answer = task.example(length, rng)
        score = (list(answer) != list(prompt), list(answer) != list(prompt)[::-1])
        if best is None or score > best_score:
            best, best_score = (prompt, answer), score
        if all(score):
            break
    return best


# -- train ------------------------------------------------------------------------------------


def task_config(cfg, task: str | None, resume: bool, overrides: list[str] | None, echo=console.print):
    """Fit ``cfg`` to its task: ``task.name``, the vocabulary's size and (unless overridden) the context.

    The context is set to the longest training example, so a learned position
    table covers exactly the trained positions; an example longer than
    ``MAX_TASK_CONTEXT`` positions is refused first.
    """
    from alilama_core.contracts.task import parse_lengths
    from alilama_core.runs.tasks import check_lengths, check_task_context, get_task

    if task:
        if resume and task != cfg.task.name:
            raise AlilamaError(f"the run was trained on task {cfg.task.name!r}, not {task!r}")
        cfg.task.name = task
    cfg.task.validate()
    built = get_task(cfg.task.name, cfg.task.options)
    if resume:
        return cfg
    lengths = parse_lengths(cfg.task.lengths)
    check_lengths(built, lengths)
    hi, need = lengths[1], check_task_context(built, lengths)  # before the context is set to it
    vocab = len(built.vocabulary())
    if cfg.model.vocab_size != vocab:
        echo(f"model.vocab_size set to the task's {vocab} symbols", highlight=False)
        cfg.model.vocab_size = vocab
    given = any(o.strip().lstrip("-").startswith("model.context_length=") for o in overrides or [])
    if not given and cfg.model.context_length != need:
        echo(f"model.context_length set to {need}, the longest example at length {hi}", highlight=False)
        cfg.model.context_length = need
    from alilama_core.engine.validate import check_config  # torch, only when a task is trained

    return check_config(cfg)


# -- eval -------------------------------------------------------------------------------------


def task_eval(
    run: str,
    task: str | None,
    lengths: str | None,
    examples: int,
    seed: int | None,
    attention: str | None,
    as_json: bool,
    force_attention: bool = False,
    verify: bool = True,
    on_loaded=None,
    log: bool = False,
) -> None:
    """Score a task run at each length; print a table or JSON and keep ``RUN/task-eval.json``.

    ``on_loaded(loaded)`` is called once the run is loaded (on cpu), before it is scored.
    ``log``: also add the scores to the run's trackers (``train.loggers``; ``eval --log``).
    """
    from alilama_core.contracts.task import parse_length_list, parse_lengths
    from alilama_core.engine import configs as cfgmod
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.tasks import check_eval_size, evaluate_task, get_task, run_task

    path = Path(run)
    if not (path / "config.yaml").is_file():
        raise AlilamaError(f"{run!r} is not an Alilama run folder (no config.yaml)")
    cfg = cfgmod.load(path / "config.yaml")
    run_task(run, cfg, task)  # a text run, or another task, is refused before the weights load
    lo, hi = parse_lengths(cfg.task.lengths)
    wanted = parse_length_list(lengths) if lengths is not None else [hi, 2 * hi, 4 * hi]
    if examples < 1:
        raise AlilamaError(f"--examples must be positive, got {examples}")
    built = get_task(cfg.task.name, cfg.task.options)
    check_eval_size(built, wanted, examples)  # before the run is loaded
    from alilama_core.app.common import loud_warnings

    with loud_warnings():
        loaded = load_run(
            run,
            attention=None if attention in (None, "auto") else attention,
            force_attention=force_attention,
            verify=verify,
        )
        if on_loaded is not None:
            on_loaded(loaded)
        rows = evaluate_task(loaded.model, built, wanted, examples, cfg.task.seed if seed is None else seed)
    result = {
        "run": str(path),
        "task": built.name,
        "options": built.options,
        "trained_lengths": [lo, hi],
        "positional": cfg.model.positional,
        "seed": cfg.task.seed if seed is None else seed,
        "rows": [asdict(r) for r in rows],
    }
    atomic_write_text(path / EVAL_FILE, json.dumps(result, indent=2) + "\n")
    if log:
        from alilama_core.app.common import log_eval_results

        scores = {}
        for r in rows:
            if r.exact_match is not None:
                where = f"eval/{built.name}/len{r.length}"
                scores.update(
                    {
                        f"{where}/exact_match": r.exact_match,
                        f"{where}/token_accuracy": r.token_accuracy,
                        f"{where}/loss": r.loss,
                    }
                )
        log_eval_results(run, loaded.checkpoint, scores)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{built.name} on {run} (trained on lengths {lo}-{hi}, {cfg.model.positional})")
    for col in ("length", "tokens", "exact match", "token accuracy", "loss", "examples"):
        table.add_column(col, justify="right")
    for r in rows:
        if r.exact_match is None:
            table.add_row(str(r.length), str(r.tokens), "n/a", "n/a", r.note, "0")
        else:
            table.add_row(
                str(r.length),
                str(r.tokens),
                f"{r.exact_match:.1%}",
                f"{r.token_accuracy:.1%}",
                f"{r.loss:.4f}",
                str(r.examples),
            )
    console.print(table, highlight=False)


# -- plot -------------------------------------------------------------------------------------


def read_task_eval(run: str | Path) -> dict:
    path = Path(run) / EVAL_FILE
    if not path.is_file():
        raise AlilamaError(f"{str(run)!r} has no {EVAL_FILE}; run `alilama eval {run} --lengths ...` first")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AlilamaError(f"{str(path)!r} is not valid JSON: {exc}") from None
    problem = _task_eval_problem(data)
    if problem:
        raise AlilamaError(
            f"{str(path)!r} is not the file `alilama eval` writes ({problem}); "
            f"write it again with `alilama eval {run} --lengths ...`"
        )
    return data


def _task_eval_problem(data) -> str | None:
    """What is wrong with a ``task-eval.json`` (``None``: it holds what ``plot_accuracy`` reads)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    trained = data.get("trained_lengths")
    if not (isinstance(trained, list) and len(trained) == 2 and all(isinstance(x, int) for x in trained)):
        return "no trained_lengths [lo, hi]"
    if not isinstance(data.get("rows"), list):
        return "no list of rows"
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, dict) or not isinstance(row.get("length"), int):
            return f"row {i} has no length"
        for key in ("exact_match", "token_accuracy"):
            value = row.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                return f"row {i}: {key} is not a number"
            if key not in row:
                return f"row {i} has no {key}"
    return None


def plot_accuracy(runs: list[str | Path], out: str | Path, metric: str = "exact_match") -> Path:
    """Accuracy against length, one line per run (from each run's ``task-eval.json``); n/a points left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise AlilamaError("give at least one run folder")
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    longest = 0
    for i, run in enumerate(runs):
        result = read_task_eval(run)
        points = [(r["length"], r[metric]) for r in result["rows"] if r.get(metric) is not None]
        if points:
            label = f"{Path(run).name} ({result.get('positional', '?')})"
            ax.plot(*zip(*points), marker="o", color=f"C{i % 10}", label=label)
        longest = max(longest, result["trained_lengths"][1])
    if longest:
        ax.axvline(longest, color="grey", ls=":", lw=1, label="longest trained length")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("length")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("Alilama task accuracy against length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    out = Path(out)
    try:
        with atomic_open(out, "wb") as f:
            fig.savefig(f, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)
    return out


TaskOpt = Annotated[
    str | None, typer.Option("--task", help="A task from `alilama tasks list` (trains on generated examples).")
]
