"""``alilama generate RUN``: stream a continuation of a prompt from a trained run."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from alilama_core.app.common import (
    CheckpointOpt,
    ForceAttentionOpt,
    RunArg,
    err_console,
    examples,
    loud_warnings,
    plain_line,
)
from alilama_core.app.run_options import (
    DecodeOpt,
    DeviceOpt,
    check_decode,
    FrequencyPenaltyOpt,
    LogitBiasOpt,
    MaxNewTokensOpt,
    NoVerifyOpt,
    PresencePenaltyOpt,
    SeedOpt,
    TemperatureOpt,
    ThreadsOpt,
    TopKOpt,
    choose_device,
    describe_loaded,
    logit_bias,
    set_threads,
    setup_decode,
)
from alilama_core.base.errors import AlilamaError


@examples(
    'alilama generate runs/essay --prompt "Once upon a time" --top-k 40',
    'alilama generate runs/essay --prompt "Once" --num-samples 3 --seed 0',
    "alilama generate runs/essay --prompt-file prompt.txt -n 100 -t 0",
)
def generate_cmd(
    run: RunArg,
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Prompt text; '-' reads stdin.")] = None,
    prompt_file: Annotated[Optional[str], typer.Option("--prompt-file", help="Read the prompt from a file.")] = None,
    max_new_tokens: MaxNewTokensOpt = 200,
    temperature: TemperatureOpt = 0.8,
    top_k: TopKOpt = None,
    top_p: Annotated[
        Optional[float],
        typer.Option("--top-p", help="Sample only among the likeliest tokens whose probabilities sum to p (nucleus)."),
    ] = None,
    repetition_penalty: Annotated[
        Optional[float],
        typer.Option("--repetition-penalty", help="Penalise tokens already in the text (above 1 repeats less)."),
    ] = None,
    presence_penalty: PresencePenaltyOpt = 0.0,
    frequency_penalty: FrequencyPenaltyOpt = 0.0,
    logit_bias_pairs: LogitBiasOpt = None,
    seed: SeedOpt = None,
    stop: Annotated[Optional[list[str]], typer.Option("--stop", help="Stop after this text (repeatable).")] = None,
    checkpoint: CheckpointOpt = None,
    no_verify: NoVerifyOpt = False,
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
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
    decode: DecodeOpt = "auto",
) -> None:
    """Stream a continuation of a prompt from a trained run."""
    import sys
    from dataclasses import replace

    from alilama_core.engine.generation import SamplingSettings, position_room, stream_text
    from alilama_core.runs.checkpoint import load_run

    if num_samples < 1:
        raise AlilamaError(f"--num-samples must be at least 1, got {num_samples}")
    n_threads = set_threads(threads)
    where = choose_device(device)

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
        logit_bias=logit_bias(logit_bias_pairs),
        seed=seed,
        stop=list(stop or []),
        decode=check_decode(decode),
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
    plain_line(describe_loaded(loaded, where, n_threads, ("short", "decode")))
    setup_decode(loaded, decode)

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
