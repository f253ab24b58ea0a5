"""``alilama eval`` on a run trained on text: the checks of its options, the scoring, and what it prints.

The scoring itself is the library's (``alilama_core.runs.evaluate.evaluate_run``);
this module gives it a progress line per file and context length, adds the
results to the run's trackers with ``--log``, and prints a table or JSON. A run
trained on an algorithmic task is scored by ``alilama_core.app.tasks.task_eval``.
"""

from __future__ import annotations

import json
from pathlib import Path

from alilama_core.app.common import StepProgress, console, log_eval_results, loud_warnings, plain_line
from alilama_core.app.run_options import describe_loaded
from alilama_core.base.errors import AlilamaError


def check_eval_choice(
    data: list[str] | None, task: str | None, lengths: str | None, context_lengths: str | None
) -> None:
    """Refuse an empty ``--lengths``/``--context-lengths`` and options of a task run mixed with a text run's."""
    for option, value, default in (
        ("--lengths", lengths, "8,16,32 (leave it out for the longest trained length, twice and four times it)"),
        ("--context-lengths", context_lengths, "128,256 (leave it out for 1x, 2x, 4x and 8x the trained context)"),
    ):
        if value is not None and not value.strip():
            raise AlilamaError(f"{option} is empty: give the lengths to score at, e.g. {option} {default}")
    task_options = [o for o, v in (("--task", task), ("--lengths", lengths)) if v is not None]
    if data and task_options:
        raise AlilamaError(
            f"--data scores a run trained on text, {' and '.join(task_options)} a run trained on a task: a run is "
            f"one or the other. Drop --data to score the task run on its generated test sets, or drop "
            f"{' and '.join(task_options)} to score a text run on {data[0]!r}"
        )
    if context_lengths is not None and task_options:
        raise AlilamaError(
            "--context-lengths is for a text run (with --data); a task run is scored at task lengths: "
            "give --lengths instead"
        )


def text_eval(
    run: str,
    data: list[str],
    context_lengths: str | None,
    *,
    attention: str = "auto",
    force_attention: bool = False,
    max_tokens: int = 262_144,
    verify: bool = True,
    as_json: bool = False,
    device: str = "cpu",
    threads: int | None = None,
    progress: bool = True,
    log: bool = False,
) -> None:
    """Score a text run on each of ``data`` at each context length; print a table or JSON.

    ``context_lengths``: ``--context-lengths`` as given (``None``: 1x, 2x, 4x and 8x
    the trained context); ``max_tokens``: tokens per file (0: all); ``device`` the
    one chosen and ``threads`` the torch threads set, for the line that says what
    was loaded; ``log``: also add the results to the run's trackers (``eval --log``).
    """
    from dataclasses import asdict

    from rich.table import Table

    from alilama_core.runs.evaluate import evaluate_run

    lengths = None
    if context_lengths:
        from alilama_core.contracts.task import parse_int_list

        lengths = parse_int_list(context_lengths, "--context-lengths", "128,256")
    if max_tokens < 0:
        raise AlilamaError(f"--max-tokens must be >= 0 (0: all), got {max_tokens}")
    for file in data:
        if not Path(file).is_file():
            raise AlilamaError(f"eval file {file!r} does not exist")
    if (Path(run) / "config.yaml").is_file():
        from alilama_core.engine import configs as cfgmod

        trained_on = cfgmod.load(Path(run) / "config.yaml").task.name
        if trained_on:
            raise AlilamaError(
                f"{run!r} was trained on task {trained_on!r}, not on text, so --data cannot score it; drop --data "
                f"to score it on the task's test sets (e.g. alilama eval {run} --lengths 8,16,32)"
            )
    from contextlib import ExitStack

    with ExitStack() as stack:
        steps: StepProgress | None = None
        evaluated = []  # the checkpoint folder scored

        def on_loaded(loaded, eval_lengths) -> None:
            nonlocal steps
            evaluated.append(loaded.checkpoint)
            shapes = ("short", "long") if max(eval_lengths) >= 1024 else ("short",)
            plain_line(describe_loaded(loaded, device, threads, shapes))
            steps = stack.enter_context(StepProgress("eval", len(data) * len(eval_lengths), progress))

        def on_step(done: int, total: int, file: str, length: int) -> None:
            steps.show(done + 1, f"{Path(file).name} at context {length:,}")

        with loud_warnings():
            rows = evaluate_run(
                run,
                data,
                lengths,
                attention=attention,
                max_tokens=max_tokens or None,
                verify=verify,
                force_attention=force_attention,
                device=device,
                on_loaded=on_loaded,
                on_step=on_step,
            )
    if log:
        results = {}
        for r in rows:
            if r.loss is not None:
                where_ = f"eval/{Path(r.file).stem}/ctx{r.context_length}"
                results.update({f"{where_}/loss": r.loss, f"{where_}/bpb": r.bpb})
        log_eval_results(run, evaluated[0], results)
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    table = Table(title=f"eval of {run}")
    for col in ("file", "context", "loss", "bits/byte", "tokens", "attention"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            Path(r.file).name,
            str(r.context_length),
            f"{r.loss:.4f}" if r.loss is not None else "n/a",
            f"{r.bpb:.4f}" if r.bpb is not None else r.note,
            f"{r.tokens:,}",
            r.attention,
        )
    console.print(table)
