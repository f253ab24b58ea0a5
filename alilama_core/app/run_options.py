"""What the commands that load a run and run its model share (generate, chat, serve, eval, viz).

The options are declared once here, as ``Annotated`` aliases: where the model
runs (``--device``, ``--threads``), how it samples (``--temperature``,
``--top-k``, the penalties, ``--logit-bias``, ``--seed``), and the one line on
stderr that says what was loaded, where, and with which attention backend.
torch is imported inside the functions, never with the module.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from alilama_core.app.common import loud_warnings, plain_line
from alilama_core.base.errors import AlilamaError

DeviceOpt = Annotated[
    str,
    typer.Option("--device", help="Where the model runs: cpu, cuda, or auto (cuda when a GPU is available, else cpu)."),
]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option("--threads", help="CPU threads for torch (default: the physical cores this process may use)."),
]
NoVerifyOpt = Annotated[bool, typer.Option("--no-verify", help="Skip the run's integrity check (hashes).")]
MaxNewTokensOpt = Annotated[
    int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate at most (chat: per reply).")
]
TemperatureOpt = Annotated[float, typer.Option("--temperature", "-t", help="Divides the logits; 0 is greedy.")]
TopKOpt = Annotated[Optional[int], typer.Option("--top-k", help="Sample only among the k likeliest tokens.")]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Random seed, for the same text on every run.")]
PresencePenaltyOpt = Annotated[
    float,
    typer.Option("--presence-penalty", help="Subtracted once from each generated token's logit (-2 to 2)."),
]
FrequencyPenaltyOpt = Annotated[
    float,
    typer.Option("--frequency-penalty", help="Subtracted per earlier use from a generated token's logit (-2 to 2)."),
]
LogitBiasOpt = Annotated[
    Optional[list[str]],
    typer.Option("--logit-bias", help="ID=BIAS added to token ID's logit (repeatable; -100 bans it)."),
]


DecodeOpt = Annotated[
    str,
    typer.Option(
        "--decode",
        help="auto: the compiled decode step when this run has one built for this machine, else eager; "
        "compiled: build it first if needed (once, 30-70 s, kept in RUN/compiled/); eager: never compiled.",
    ),
]


DECODES = ("auto", "eager", "compiled")


def check_decode(decode: str) -> str:
    """``--decode``'s value, or the error that names the option and its choices (before any loading)."""
    if decode not in DECODES:
        raise AlilamaError(f"--decode must be one of {', '.join(DECODES)}; got {decode!r}")
    return decode


BUILD_DECODE_ENV = "ALILAMA_BUILD_DECODE"
BuildDecodeOpt = Annotated[
    bool,
    typer.Option(
        "--build-decode/--no-build-decode",
        envvar=BUILD_DECODE_ENV,
        help="End by building the run's compiled decode step (RUN/compiled/), which generate, chat, serve and "
        "load_run then decode on; it takes 30-160 s once, after training.",
    ),
]


def build_decode_step(run, echo=plain_line) -> float | None:
    """The last stage of ``alilama train`` and ``quickstart``: build the finished run's compiled decode step
    (any batch size), so every entry point decodes on it from its first token. Says how long it took, or why
    there is none (then they decode eagerly); returns the seconds, or ``None``."""
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.compiled import prepare

    echo(f"decode: building the run's compiled decode step (once; --no-build-decode or {BUILD_DECODE_ENV}=0 skip it)")
    seconds, reason = prepare(load_run(run, verify=False))
    if reason is None:
        echo(f"decode: compiled step ready in {seconds:.1f} s, kept in {run}/compiled/")
        return seconds
    echo(f"decode: no compiled step, generate decodes eagerly ({reason})")
    return None


def setup_decode(loaded, decode: str) -> None:
    """Keep ``loaded``'s compiled decode steps in its run folder, build one for ``--decode compiled``, and say
    on stderr which path decodes (and why not the compiled one)."""
    from alilama_core.engine.decode import NOT_BUILT, decode_plan
    from alilama_core.runs.compiled import attach, prepare

    check_decode(decode)
    attach(loaded)
    if decode == "compiled":
        plain_line("decode: building or loading the compiled step (once per run and machine)")
        seconds, reason = prepare(loaded)
        if reason is None:
            plain_line(f"decode: compiled step ready in {seconds:.1f} s")
    plan = decode_plan(loaded.model, decode)
    if plan.path == "compiled":
        plain_line("decode: compiled (a static-cache step; --decode eager to compare)")
    elif decode == "auto" and plan.reason and plan.reason.startswith(NOT_BUILT):
        plain_line(
            "decode: eager; `--decode compiled` builds this run's compiled step once (faster from then on; "
            "`alilama train` builds it at the end unless --no-build-decode)"
        )
    else:
        plain_line(f"decode: eager ({plan.reason})")


def logit_bias(pairs: list[str] | None) -> dict[int, float]:
    """``--logit-bias 50=-100 --logit-bias 7=2.5`` as ``{50: -100.0, 7: 2.5}``."""
    out: dict[int, float] = {}
    for pair in pairs or []:
        token, _, bias = pair.partition("=")
        try:
            out[int(token)] = float(bias)
        except ValueError:
            raise AlilamaError(f"--logit-bias takes ID=BIAS, like 50=-100; got {pair!r}") from None
    return out


def choose_device(device: str) -> str:
    """``cpu`` or ``cuda`` for ``--device`` (``auto``: cuda when available); cuda without a GPU is refused."""
    import torch

    wanted = (device or "").strip().lower()
    if wanted not in ("auto", "cpu", "cuda"):
        raise AlilamaError(f"--device must be cpu, cuda or auto, got {device!r}")
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise AlilamaError(
            "--device cuda: no CUDA GPU is available here (torch.cuda.is_available() is False); "
            "use --device cpu, or --device auto to take a GPU only when there is one"
        )
    return wanted


def set_threads(threads: int | None) -> int:
    """Apply ``--threads`` (``None``: the default of ``alilama_core.engine.threads``); the number set."""
    from alilama_core.engine.threads import apply_threads

    if threads is not None and threads < 1:
        raise AlilamaError(
            f"--threads must be a positive integer, got {threads} (leave it out for the default: "
            "the physical cores this process may use)"
        )
    return apply_threads(threads)


def backend_description(model_config, device: str, shapes: tuple[str, ...]) -> str:
    """The attention backend a model runs with; for a router (``auto``), what it chooses on ``device``."""
    from alilama_core.contracts.attention import attention_backend
    from alilama_core.engine.registry import get_registry

    name = model_config.attention
    try:
        backend = attention_backend(get_registry().get("attention", name))
    except Exception:  # the report never fails the command
        return name
    if backend.resolve is None:
        return name
    from alilama_core.app.info import resolved_backend

    parts = []
    for shape in shapes:
        try:
            parts.append(f"{shape}: {resolved_backend(model_config, device, shape).name}")
        except Exception as exc:  # no eligible backend: say why
            parts.append(f"{shape}: none ({exc})")
    return f"{name} (chooses on {device}: {', '.join(parts)})"


def describe_loaded(loaded, device: str, threads: int, shapes: tuple[str, ...]) -> str:
    """``loaded RUN checkpoint final on cpu (2 threads); attention: ...``: what a command runs with."""
    return (
        f"loaded {loaded.path} checkpoint {loaded.checkpoint.name} on {device} ({threads} "
        f"thread{'s' if threads != 1 else ''}); attention: {backend_description(loaded.config.model, device, shapes)}"
    )


def load_to_sample(run: str, checkpoint: str | None, device: str, threads: int | None):
    """The run, loaded on ``--device`` with ``--threads`` for sampling, after the plain line that says so."""
    from alilama_core.runs.checkpoint import load_run

    n_threads = set_threads(threads)
    where = choose_device(device)
    with loud_warnings():
        loaded = load_run(run, checkpoint=checkpoint, map_location=where)
    plain_line(describe_loaded(loaded, where, n_threads, ("short", "decode")))
    return loaded
