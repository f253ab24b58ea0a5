"""The ``alilama`` command line: one sub-app per noun; plugins add their own.

Heavy imports (torch) happen inside commands, so ``alilama --help`` is fast.
Errors that Alilama raises on purpose are printed as one clear line and exit 1.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from alilama_core.app import commands, tokenizer, viz
from alilama_core.app.common import (
    ConfigOpt,
    ForceAttentionOpt,
    ConfigHelpCommand,
    JsonOpt,
    OverridesArg,
    PresetOpt,
    _Group,
    add_config_help,
    console,
    err_console,
    help_examples,
    loud_warnings,
    plain_line,
    resolve_config,
    warn_replacements,
)
from alilama_core.contracts.errors import AlilamaError

app = typer.Typer(
    cls=_Group,
    name="alilama",
    help="Train, study and share small GPT-style language models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    epilog=help_examples(
        "alilama quickstart",
        "alilama train --config configs/essay.yaml --data data/ --out runs/essay",
        'alilama generate runs/essay --prompt "Once upon a time"',
    ),
)
model_app = typer.Typer(
    help="Inspect model configurations.",
    no_args_is_help=True,
    epilog=help_examples("alilama model info --preset essay"),
)
app.add_typer(model_app, name="model")
commands.register(app)  # data, train, eval, plot, quickstart
add_config_help(app, "train")  # `alilama train --help` lists every config field with its default
tokenizer.register(app)  # tokenizer train, encode, decode, info
viz.register(app)  # viz attention, viz positional
from alilama_core.app.tasks import tasks_app  # noqa: E402

app.add_typer(tasks_app, name="tasks")

from alilama_core.app import sweep  # noqa: E402

sweep.register(app)  # sweep: many runs on Ray Tune


@app.command("plugins", epilog=help_examples("alilama plugins", "alilama plugins --check --json"))
def plugins_cmd(
    as_json: JsonOpt = False,
    check: Annotated[
        bool, typer.Option("--check", help="Import every registered object; exit 1 if any plugin fails.")
    ] = False,
) -> None:
    """List installed plugins: distribution, version, what each registers, and availability."""
    from alilama_core.contracts.attention import AttentionBackend
    from alilama_core.engine.registry import get_registry

    reg = get_registry()
    rows = []
    for kind, table in reg.tables().items():
        for name, entry in sorted(table.items()):
            status, reason = "ok", ""
            if check or kind in ("attention", "logger"):
                try:
                    obj = entry.resolve()
                    if isinstance(obj, AttentionBackend):
                        reason = obj.available() or ""
                    elif kind == "logger" and hasattr(obj, "check_available"):
                        obj.check_available()  # a missing library: the extra that installs it
                except Exception as exc:  # an import error is shown, not raised
                    reason = f"{type(exc).__name__}: {exc}"
                status = "unavailable" if reason else "ok"
            rows.append(
                dict(
                    kind=kind,
                    name=name,
                    plugin=entry.plugin,
                    distribution=entry.distribution,
                    version=entry.version,
                    available=status == "ok",
                    reason=reason,
                    description=entry.meta.get("description", ""),
                    replaces=None
                    if entry.replaced is None
                    else dict(
                        plugin=entry.replaced.plugin,
                        distribution=entry.replaced.distribution,
                        version=entry.replaced.version,
                    ),
                )
            )
    failures = [vars(f) for f in (reg.check() if check else reg.failures())]
    if as_json:
        print(json.dumps({"registered": rows, "failed": failures}, indent=2))
    else:
        _print_plugins(rows, failures)
    warn_replacements()  # on stderr, also beside --json
    if check and failures:
        raise typer.Exit(1)


def _print_plugins(rows: list[dict], failures: list[dict]) -> None:
    table = Table(title="Alilama plugins")
    for col in ("kind", "name", "plugin", "distribution", "version", "status"):
        table.add_column(col)
    notes = []
    for r in rows:
        status = "[green]ok[/]"
        if not r["available"]:
            notes.append(f"[{len(notes) + 1}] {r['kind']} {r['name']}: {r['reason']}")
            status = f"[yellow]unavailable [{len(notes)}][/]"
        if r["replaces"]:
            status += f" [bold yellow]replaces {r['replaces']['distribution']}'s[/]"
        table.add_row(r["kind"], r["name"], r["plugin"], r["distribution"], r["version"], status)
    console.print(table)
    for note in notes:
        console.print(note, markup=False, highlight=False)
    for f in failures:
        what = "registered a name another plugin holds" if f.get("refused") else "failed to load and was skipped"
        err_console.print(
            f"[yellow]warning:[/] plugin {f['plugin']!r} ({f['distribution']}) {what}: {escape(f['error'])}",
            highlight=False,
            soft_wrap=True,
        )


@model_app.command(
    "info",
    cls=ConfigHelpCommand,
    context_settings={"ignore_unknown_options": True},
    epilog=help_examples(
        "alilama model info --preset essay",
        "alilama model info --preset essay model.positional=rope model.n_layers=4",
        "alilama model info --config configs/essay.yaml --json",
    ),
)
def model_info(
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    overrides: OverridesArg = None,
    as_json: JsonOpt = False,
) -> None:
    """Build a model from a config and print its parameter table, plugins and bias memory."""
    from alilama_core.app.info import model_report

    cfg = resolve_config(config, preset, overrides)
    report = model_report(cfg.model)
    warn_replacements()  # on stderr, also beside --json
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table(title=f"Parameters ({report['parameters']:,} total, tied head counted once)")
    for col in ("parameter", "shape", "copies", "parameters"):
        table.add_column(col, justify="left" if col in ("parameter", "shape") else "right")
    for row in report["table"]:
        table.add_row(row["name"], str(tuple(row["shape"])), str(row["count"]), f"{row['numel']:,}")
    console.print(table)
    m = cfg.model
    console.print(
        f"model: d_model={m.d_model} n_layers={m.n_layers} n_heads={m.n_heads} d_mlp={m.d_mlp} "
        f"context={m.context_length} vocab={m.vocab_size}",
        highlight=False,
    )
    for kind in ("positional", "attention"):
        p = report["plugins"][kind]
        replaces = f"; REPLACES {p['replaces']}'s {p['name']!r}" if p["replaces"] else ""
        console.print(
            f"{kind}: {p['name']} ({p['distribution']} {p['version']}{replaces}; {p['detail']})",
            highlight=False,
            markup=False,
        )
    console.print(f"bias memory: {report['bias_memory']}", highlight=False, markup=False, soft_wrap=True)


@app.command(
    "generate",
    epilog=help_examples(
        'alilama generate runs/essay --prompt "Once upon a time" --top-k 40',
        'alilama generate runs/essay --prompt "Once" --num-samples 3 --seed 0',
        "alilama generate runs/essay --prompt-file prompt.txt -n 100 -t 0",
    ),
)
def generate_cmd(
    run: Annotated[str, typer.Argument(help="Run folder (uses RUN/final, else the latest checkpoint).")],
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Prompt text; '-' reads stdin.")] = None,
    prompt_file: Annotated[Optional[str], typer.Option("--prompt-file", help="Read the prompt from a file.")] = None,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate after the prompt.")
    ] = 200,
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="Divides the logits; 0 is greedy.")] = 0.8,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Sample only among the k likeliest tokens.")] = None,
    top_p: Annotated[
        Optional[float],
        typer.Option("--top-p", help="Sample only among the likeliest tokens whose probabilities sum to p (nucleus)."),
    ] = None,
    repetition_penalty: Annotated[
        Optional[float],
        typer.Option("--repetition-penalty", help="Penalise tokens already in the text (above 1 repeats less)."),
    ] = None,
    presence_penalty: commands.PresencePenaltyOpt = 0.0,
    frequency_penalty: commands.FrequencyPenaltyOpt = 0.0,
    logit_bias: commands.LogitBiasOpt = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed, for the same text on every run.")] = None,
    stop: Annotated[Optional[list[str]], typer.Option("--stop", help="Stop after this text (repeatable).")] = None,
    checkpoint: Annotated[
        Optional[str], typer.Option("--checkpoint", help="Checkpoint folder name, e.g. step-00001000.")
    ] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Skip the run's integrity check (hashes).")] = False,
    attention: Annotated[
        Optional[str],
        typer.Option("--attention", help="Backend to sample with (default: the run's own)."),
    ] = None,
    force_attention: ForceAttentionOpt = False,
    num_samples: Annotated[
        int,
        typer.Option(
            "--num-samples",
            help="Continuations of the prompt, one after another (sample i uses seed + i - 1 when --seed is given).",
        ),
    ] = 1,
    device: commands.DeviceOpt = "auto",
    threads: commands.ThreadsOpt = None,
) -> None:
    """Stream a continuation of a prompt from a trained run."""
    import sys
    from dataclasses import replace

    from alilama_core.engine.generation import SamplingSettings, stream_text
    from alilama_core.runs.checkpoint import load_run

    if num_samples < 1:
        raise AlilamaError(f"--num-samples must be at least 1, got {num_samples}")
    n_threads = commands.set_threads(threads)
    where = commands.choose_device(device)

    if prompt is not None and prompt_file is not None:
        raise AlilamaError("give either --prompt or --prompt-file, not both")
    if prompt_file is not None:
        text = sys.stdin.read() if prompt_file == "-" else _read_text(prompt_file)
    elif prompt == "-":
        text = sys.stdin.read()
    else:
        text = prompt or ""
    settings = SamplingSettings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        repetition_penalty=repetition_penalty,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        logit_bias=commands.logit_bias(logit_bias),
        seed=seed,
        stop=list(stop or []),
    ).validate()
    if seed is not None:
        replace(settings, seed=seed + num_samples - 1).validate()  # sample i uses seed + i - 1
    with loud_warnings():
        loaded = load_run(
            run,
            checkpoint=checkpoint,
            map_location=where,
            verify=not no_verify,
            attention=attention,
            force_attention=force_attention,
        )
    plain_line(commands.describe_loaded(loaded, where, n_threads, ("short", "decode")))
    from alilama_core.engine.generation import position_room

    room = position_room(loaded.model, len(loaded.tokenizer.encode(text, allowed_special="all")) or 1)
    if room is not None and 0 < room < max_new_tokens:
        err_console.print(
            f"note: {loaded.config.model.positional} positions end {room} tokens after this prompt; "
            f"generation stops there",
            highlight=False,
        )
    plain = not err_console.is_terminal
    for i in range(num_samples):
        if num_samples > 1:
            if plain:
                plain_line(f"sample {i + 1}/{num_samples}")  # in a terminal, the headers on stdout show it
            sys.stdout.write(f"--- sample {i + 1} ---\n")
        sample = replace(settings, seed=None if seed is None else seed + i)
        sys.stdout.write(text)
        generated = False
        for piece in stream_text(loaded.model, loaded.tokenizer, text, sample):
            generated = generated or bool(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
        if not generated:
            plain_line(f"note: {_why_nothing(max_new_tokens, room)}")


@app.command(
    "serve",
    epilog=help_examples(
        "alilama serve runs/essay",
        "alilama serve runs/essay --port 8080 --api-key $KEY --max-batch 16",
    ),
)
def serve_cmd(
    run: Annotated[str, typer.Argument(help="Run folder (uses RUN/final, else the latest checkpoint).")],
    host: Annotated[str, typer.Option("--host", help="Address to listen on (127.0.0.1: this machine only).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    api_key: Annotated[
        Optional[str],
        typer.Option("--api-key", envvar="ALILAMA_API_KEY", help="Require Authorization: Bearer KEY on every request."),
    ] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Sequences decoded together.")] = 8,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Largest max_tokens a request may ask for.")] = 256,
    max_prompt_tokens: Annotated[
        Optional[int], typer.Option("--max-prompt-tokens", help="Longest prompt accepted (default 768).")
    ] = None,
    max_queue: Annotated[int, typer.Option("--max-queue", help="Sequences that may wait for the batch.")] = 64,
    body_timeout: Annotated[
        float, typer.Option("--body-timeout", help="Seconds a client may take to send its request body (then 408).")
    ] = 30.0,
    checkpoint: Annotated[
        Optional[str], typer.Option("--checkpoint", help="Checkpoint folder name, e.g. step-00001000.")
    ] = None,
    device: commands.DeviceOpt = "auto",
    threads: commands.ThreadsOpt = None,
) -> None:
    """Serve a run over the OpenAI HTTP API (completions and chat, streamed), batching concurrent requests."""
    from pathlib import Path

    import importlib.util

    from alilama_core.app.serve import Limits, serve

    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise AlilamaError(f"serving needs {' and '.join(missing)}: pip install 'alilama[serve]'")

    for name, value in (("--max-batch", max_batch), ("--max-tokens", max_tokens), ("--max-queue", max_queue)):
        if value < 1:
            raise AlilamaError(f"{name} must be at least 1, got {value}")
    if max_prompt_tokens is not None and max_prompt_tokens < 1:
        raise AlilamaError(f"--max-prompt-tokens must be at least 1, got {max_prompt_tokens}")
    if not 0 < body_timeout <= 3600:
        raise AlilamaError(f"--body-timeout must be between 0 and 3600 seconds, got {body_timeout}")
    if not 0 < port < 65536:
        raise AlilamaError(f"--port must be between 1 and 65535, got {port}")
    loaded = _load_to_sample(run, checkpoint, device, threads)
    limit = loaded.model.positional.max_positions
    prompt_limit = max_prompt_tokens or (768 if limit is None else max(1, min(768, limit - 1)))
    limits = Limits(
        max_tokens=max_tokens,
        max_prompt_tokens=prompt_limit,
        max_batch=max_batch,
        max_queue=max_queue,
        body_seconds=body_timeout,
    )
    limits.check(loaded.model)
    model_id = Path(run).resolve().name
    if api_key is None and not _loopback(host):
        err_console.print(
            f"warning: --host {host} without --api-key: anyone who reaches this port can use the model and "
            "its compute; give --api-key KEY (or ALILAMA_API_KEY) or serve on 127.0.0.1",
            highlight=False,
        )
    plain_line(f"serving {model_id} on http://{host}:{port}/v1 (batch {max_batch}, queue {max_queue})")
    serve(loaded, model_id, host, port, limits, api_key)


@app.command(
    "chat",
    epilog=help_examples("alilama chat runs/essay", "alilama chat runs/essay --temperature 0.7 --top-k 40"),
)
def chat_cmd(
    run: Annotated[str, typer.Argument(help="Run folder (uses RUN/final, else the latest checkpoint).")],
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Longest reply, in tokens.")] = 100,
    temperature: Annotated[float, typer.Option("--temperature", "-t", help="Divides the logits; 0 is greedy.")] = 0.8,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Sample only among the k likeliest tokens.")] = None,
    presence_penalty: commands.PresencePenaltyOpt = 0.0,
    frequency_penalty: commands.FrequencyPenaltyOpt = 0.0,
    logit_bias: commands.LogitBiasOpt = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Random seed.")] = None,
    checkpoint: Annotated[
        Optional[str], typer.Option("--checkpoint", help="Checkpoint folder name, e.g. step-00001000.")
    ] = None,
    device: commands.DeviceOpt = "auto",
    threads: commands.ThreadsOpt = None,
) -> None:
    """Chat with a run in the terminal (streamed; /reset clears the history, /quit or Ctrl-D leaves)."""
    import sys

    from alilama_core.app.serve import chat_turns
    from alilama_core.engine.chat import run_template
    from alilama_core.engine.generation import SamplingSettings

    settings = SamplingSettings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        logit_bias=commands.logit_bias(logit_bias),
        seed=seed,
    ).validate()
    loaded = _load_to_sample(run, checkpoint, device, threads)
    settings.validate(loaded.model.config.vocab_size)
    interactive = sys.stdin.isatty()
    if interactive:
        err_console.print("a base model continues text; it was not trained to chat. /reset, /quit", highlight=False)

    def read() -> str | None:
        if interactive:
            sys.stdout.write("you> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        return None if line == "" else line

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    chat_turns(loaded, settings, run_template(loaded.path), read, write)


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine alone (a loopback address or ``localhost``)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _load_to_sample(run: str, checkpoint: str | None, device: str, threads: int | None):
    """The run, loaded on ``--device`` with ``--threads`` for sampling, and the plain line that says so."""
    from alilama_core.runs.checkpoint import load_run

    n_threads = commands.set_threads(threads)
    where = commands.choose_device(device)
    with loud_warnings():
        loaded = load_run(run, checkpoint=checkpoint, map_location=where)
    plain_line(commands.describe_loaded(loaded, where, n_threads, ("short", "decode")))
    return loaded


def _why_nothing(max_new_tokens: int, room: int | None) -> str:
    """Why a continuation came out empty, in words."""
    if max_new_tokens == 0:
        return "--max-new-tokens 0 asked for no new tokens; nothing was generated"
    if room is not None and room <= 0:
        return "the prompt fills every position the model has; nothing was generated"
    return "the model ended the text at once (end-of-text); nothing was generated"


def _read_text(path: str) -> str:
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise AlilamaError(f"prompt file {path!r} does not exist")
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AlilamaError(
            f"prompt file {path!r} is not valid UTF-8 (byte offset {exc.start}); convert it to UTF-8"
        ) from None


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from alilama_core.engine.registry import get_registry

    get_registry().add_commands(app)
    app(args=argv)


def get_app() -> typer.Typer:
    """The app with plugin commands added (for ``typer.testing.CliRunner``)."""
    from alilama_core.engine.registry import get_registry

    get_registry().add_commands(app)
    return app
