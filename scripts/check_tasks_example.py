"""Run the example at the top of docs/tasks.md as written, and write what it reached under it.

The example is the fenced block between ``<!-- tasks-example:begin -->`` and
``<!-- tasks-example:end -->``. Every ``alilama ...`` command in it runs, in
order, in a fresh work folder (so its relative paths, ``runs/...``, land
there), with ``alilama`` replaced by the executable next to this Python. The
scores each evaluated run keeps in ``RUN/task-eval.json`` (checked against the
``--json`` output where the block asks for it), its steps and the minutes its
``train`` command took go to ``docs/figures/tasks_example.json``; the block
between ``<!-- tasks-example-result:begin -->`` and
``<!-- tasks-example-result:end -->`` is rendered from that file.

    nice .venv/bin/python scripts/check_tasks_example.py                # run the example (a few minutes)
    .venv/bin/python scripts/check_tasks_example.py --report-only       # the result block again from the JSON
    .venv/bin/python scripts/check_tasks_example.py --work build/tasks-example   # keep the work folder

tests/tasks/test_docs_example.py checks that the page shows what this script
renders from the saved JSON, and that every command parses against the CLI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "tasks.md"
RESULTS = ROOT / "docs" / "figures" / "tasks_example.json"
BEGIN, END = "<!-- tasks-example:begin -->", "<!-- tasks-example:end -->"
RESULT_BEGIN, RESULT_END = "<!-- tasks-example-result:begin -->", "<!-- tasks-example-result:end -->"


# -- the example block ------------------------------------------------------------------------


def example_block(text: str) -> str:
    """The body of the fenced code block between the example markers."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC.name}: no {BEGIN} ... {END} markers")
    inner = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    fenced = re.search(r"^```[a-z]*\n(.*?)^```\s*$", inner, re.S | re.M)
    if not fenced:
        raise SystemExit(f"{DOC.name}: no fenced code block between the example markers")
    return fenced.group(1)


def commands(block: str) -> list[list[str]]:
    """Each command of the block as its arguments after ``alilama`` (continuation lines joined, comments cut)."""
    out = []
    for line in re.sub(r"\\\n", " ", block).splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] != "alilama":
            raise SystemExit(f"the example runs something other than alilama: {line.strip()!r}")
        out.append(words[1:])
    return out


class CommandError(ValueError):
    """A command of the example that the CLI would refuse before doing anything."""


def parse(args: list[str]) -> tuple[tuple[str, ...], dict]:
    """The subcommand (e.g. ``("viz", "attention")``) and its parameters, as the real CLI parses ``args``.

    ``train`` takes unknown words as config overrides, so its overrides (and
    ``--threads``, ``--preset``, ``--task``) are also resolved into the config it
    would train with, returned as ``params["built_config"]``: a misspelt option or
    field fails here as it would fail there. Raises ``CommandError``.
    """
    import typer

    from alilama_core.app.cli import get_app

    cmd, path, rest = typer.main.get_command(get_app()), [], list(args)
    while hasattr(cmd, "commands"):  # a group (typer vendors its own click, so no isinstance)
        if not rest or rest[0] not in cmd.commands:
            raise CommandError(f"no such command: alilama {shlex.join([*path, *rest[:1]])}")
        path.append(rest.pop(0))
        cmd = cmd.commands[path[-1]]
    try:
        params = dict(cmd.make_context(shlex.join(["alilama", *path]), rest).params)
    except Exception as exc:  # the vendored click's UsageError and its kin
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise CommandError(f"alilama {shlex.join(args)}: {message}") from None
    if tuple(path) == ("train",) and not params["resume"]:
        params["built_config"] = train_config(params, args)
    return tuple(path), params


def train_config(params: dict, args: list[str]):
    """The config ``alilama train`` would build from its parsed parameters (nothing is trained)."""
    from alilama_core.app.common import resolve_config
    from alilama_core.app.tasks import task_config
    from alilama_core.base.errors import AlilamaError

    overrides = list(params["overrides"] or [])
    if params["threads"] is not None:
        overrides.append(f"train.threads={params['threads']}")
    try:
        cfg = resolve_config(params["config"], params["preset"], overrides)
        if params["task"] or cfg.task.name:
            cfg = task_config(cfg, params["task"], False, overrides, echo=lambda *a, **k: None)
    except AlilamaError as exc:
        raise CommandError(f"alilama {shlex.join(args)}: {exc}") from None
    return cfg


def runs_read(args: list[str]) -> list[str]:
    """The run folders an ``eval``, ``plot`` or ``viz attention`` command reads; none for other commands."""
    path, params = parse(args)
    if path in (("eval",), ("viz", "attention")):
        return [params["run"]]
    if path == ("plot",):
        return list(params["runs"])
    return []


def run_created(args: list[str]) -> str | None:
    """The run folder a ``train`` command creates (its ``--out``)."""
    path, params = parse(args)
    return params["out"] if path == ("train",) else None


# -- running it -------------------------------------------------------------------------------


def run_example(work: Path) -> dict:
    """Run every command of the example in ``work``; the results the page reports."""
    import torch

    from alilama_core.engine import configs

    exe = Path(sys.executable).with_name("alilama")
    cmds = commands(example_block(DOC.read_text(encoding="utf-8")))
    for args in cmds:  # a misspelt command fails now, not after minutes of training
        parse(args)
    trained: dict[str, dict] = {}
    json_outputs: dict[str, dict] = {}
    wrote: list[str] = []
    started = time.perf_counter()
    env = {**os.environ, "COLUMNS": "120"}
    for args in cmds:
        print("$ alilama " + shlex.join(args), flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([str(exe), *args], cwd=work, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        sys.stdout.write(proc.stdout if args[0] != "train" else "".join(proc.stdout.splitlines(True)[-2:]))
        if proc.returncode:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"`alilama {shlex.join(args)}` failed with exit status {proc.returncode}")
        if run_created(args):
            trained[run_created(args)] = {"train_seconds": round(seconds, 1)}
        if parse(args)[0] == ("eval",) and parse(args)[1]["as_json"]:
            json_outputs[runs_read(args)[0]] = json.loads(proc.stdout)
        wrote += [m.group(1) for m in re.finditer(r"^wrote (\S+)", proc.stdout, re.M)]
    total = time.perf_counter() - started

    runs = []
    for name, info in trained.items():
        folder = work / name
        state = json.loads((folder / "final" / "state.json").read_text())
        config = configs.load(folder / "config.yaml")
        row = {"run": name, "positional": config.model.positional, "steps": state["step"], **info}
        row["threads"] = config.train.threads
        scores = folder / "task-eval.json"
        if scores.is_file():
            result = json.loads(scores.read_text())
            if name in json_outputs and json_outputs[name]["rows"] != result["rows"]:
                raise SystemExit(f"`alilama eval {name} --json` printed other scores than {scores.name} keeps")
            row["trained_lengths"] = result["trained_lengths"]
            row["rows"] = [
                {k: r[k] for k in ("length", "exact_match", "token_accuracy", "examples", "note")}
                for r in result["rows"]
            ]
        runs.append(row)
    return {
        "commands": [shlex.join(["alilama", *a]) for a in cmds],
        "runs": runs,
        "wrote": wrote,
        "total_seconds": round(total, 1),
        "date": dt.datetime.now(dt.timezone.utc).date().isoformat(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


# -- the result block -------------------------------------------------------------------------


def pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def render(results: dict) -> str:
    """The Markdown between the result markers, from the saved results alone."""
    threads = sorted({r["threads"] for r in results["runs"]})
    lines = [
        RESULT_BEGIN,
        (
            f"What the example reached, run as written by `scripts/check_tasks_example.py` on "
            f"{results['date']} (torch {results['torch']}, Python {results['python']}, {results['machine']}, "
            f"{results['cpus']} CPU cores; each run trained on {', '.join(map(str, threads))} thread): "
            f"{len(results['runs'])} runs, {results['total_seconds'] / 60:.1f} minutes for the whole block. "
            "Exact match and per-token accuracy on the fixed test examples of `alilama eval`:"
        ),
        "",
        "| run | scheme | steps | training | length | exact match | per-token accuracy | examples |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        head = [f"`{run['run']}`", run["positional"], str(run["steps"]), f"{run['train_seconds'] / 60:.1f} min"]
        for r in run.get("rows", []):
            trained = " (trained)" if r["length"] == run["trained_lengths"][1] else ""
            cells = [f"{r['length']}{trained}", pct(r["exact_match"]), pct(r["token_accuracy"]), str(r["examples"])]
            lines.append("| " + " | ".join(head + cells) + " |")
            head = [""] * len(head)
    if results["wrote"]:
        lines += ["", "It also wrote " + ", ".join(f"`{p}`" for p in results["wrote"]) + "."]
    lines.append(RESULT_END)
    return "\n".join(lines)


def write_page(block: str) -> None:
    """Put ``block`` between the result markers (added right after the example when missing)."""
    from alilama_core.base.files import atomic_write_text

    text = DOC.read_text(encoding="utf-8")
    if RESULT_BEGIN in text and RESULT_END in text:
        text = text[: text.index(RESULT_BEGIN)] + block + text[text.index(RESULT_END) + len(RESULT_END) :]
    else:
        at = text.index(END) + len(END)
        text = text[:at] + "\n\n" + block + text[at:]
    atomic_write_text(DOC, text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", help="work folder to run in (kept; default: a temporary one)")
    p.add_argument("--report-only", action="store_true", help="rewrite the result block from the saved JSON")
    args = p.parse_args()
    from alilama_core.base.files import atomic_write_text

    if not args.report_only:
        if args.work:
            work = Path(args.work)
            work.mkdir(parents=True, exist_ok=False)
            results = run_example(work.resolve())
        else:
            with tempfile.TemporaryDirectory(prefix="tasks-example-") as tmp:
                results = run_example(Path(tmp))
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(RESULTS, json.dumps(results, indent=1) + "\n")
    block = render(json.loads(RESULTS.read_text(encoding="utf-8")))
    write_page(block)
    print(block)


if __name__ == "__main__":
    main()
