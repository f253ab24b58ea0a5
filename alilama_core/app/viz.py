"""``alilama viz``: attention maps, the interactive tape, and positional terms as pictures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alilama_core.app.common import (
    CheckpointOpt,
    ConfigOpt,
    ForceAttentionOpt,
    OverridesArg,
    OverwriteOpt,
    PresetOpt,
    RunArg,
    console,
    help_examples,
    loud_warnings,
    plain_line,
    resolve_config,
)
from alilama_core.app.run_options import DeviceOpt, ThreadsOpt, choose_device, describe_loaded, set_threads
from alilama_core.base.errors import AlilamaError
from alilama_core.base.limits import describe, limit

viz_app = typer.Typer(
    help="Draw what a model does: attention maps, the tape, positional terms.",
    no_args_is_help=True,
    epilog=help_examples(
        'alilama viz attention runs/essay --prompt "Once upon a time" --out viz/',
        "alilama viz positional --preset essay",
    ),
)


def read_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The prompt text from ``--prompt`` or ``--prompt-file`` (exactly one)."""
    if (prompt is None) == (prompt_file is None):
        raise AlilamaError("give exactly one of --prompt TEXT or --prompt-file PATH")
    if prompt is not None:
        return prompt
    path = Path(prompt_file)
    if not path.is_file():
        raise AlilamaError(f"prompt file {prompt_file!r} does not exist")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AlilamaError(f"prompt file {prompt_file!r} is not valid UTF-8; convert it to UTF-8") from None


def attention_pictures(
    run: str,
    text: str,
    out: str | Path,
    layer: int | None = None,
    head: int | None = None,
    checkpoint: str | None = None,
    attention: str | None = None,
    html: bool = True,
    force_attention: bool = False,
    overwrite: bool = False,
    device: str = "cpu",
    on_loaded=None,
) -> list[Path]:
    """Write the attention grid (or one map), the head distances and the HTML tape for ``run``; return the paths.

    A run trained with a non-exact backend (``exact=False``, e.g. a sliding window) is refused with an
    ``UnsupportedError`` naming it, before anything is written: the maps show exact attention only.

    ``out`` is a folder of pictures that Alilama writes whole: new or empty, or
    (with ``overwrite``) one that an earlier call wrote and that holds nothing
    else. It is built beside its place and swapped in (see ``alilama_core.runs.outputs``),
    so a user's files are never overwritten. ``device``: where the model runs (``"cpu"``, ``"cuda"``);
    ``on_loaded(loaded)`` is called once the run is loaded, before anything is drawn.
    """
    from alilama_core.app.viz_draw import draw_grid, draw_map, read_tape
    from alilama_core.app.viz_page import write_page
    from alilama_core.base.files import exclusive_lock
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.outputs import building, check_output

    if head is not None and layer is None:
        raise AlilamaError("--head needs --layer too (e.g. --layer 0 --head 3)")
    with loud_warnings():
        loaded = load_run(
            run, checkpoint=checkpoint, map_location=device, attention=attention, force_attention=force_attention
        )
    if on_loaded is not None:
        on_loaded(loaded)
    tape = read_tape(loaded.model, loaded.tokenizer, text)
    out = Path(out)
    with exclusive_lock(out, "--out folder"):
        check_output(out, "viz", overwrite, inputs=[run], what="--out folder")  # the prompt and run are fine
        with building(out, "viz", "--out folder") as work:
            written = []
            if layer is not None and head is not None:
                written.append(draw_map(tape, work / f"attention_l{layer}_h{head}.png", layer, head))
            elif layer is not None:
                from alilama_core.app.viz_draw import _check

                _check(tape, layer, None)
                written += [
                    draw_map(tape, work / f"attention_l{layer}_h{h}.png", layer, h) for h in range(tape.shape[1])
                ]
            else:
                written.append(draw_grid(tape, work / "attention.png"))
            if html:
                written.append(write_page(tape, work / "tape.html", title=f"Alilama tape: {Path(run).name}"))
    written = [out / Path(p).name for p in written]
    for note in tape.notes:
        console.print(f"note: {note}", highlight=False)
    return written


@viz_app.command(
    "attention",
    epilog=help_examples(
        'alilama viz attention runs/essay --prompt "Once upon a time" --out viz/',
        'alilama viz attention runs/sort --prompt "52816=12568" --layer 0 --out viz/',
    ),
)
def attention_cmd(
    run: RunArg,
    prompt: Annotated[str | None, typer.Option("--prompt", help="Prompt text.")] = None,
    prompt_file: Annotated[str | None, typer.Option("--prompt-file", help="Read the prompt from a file.")] = None,
    out: Annotated[
        str,
        typer.Option("--out", "-o", help="New or empty folder for attention.png and tape.html (see --overwrite)."),
    ] = "viz",
    layer: Annotated[
        int | None,
        typer.Option("--layer", help="Draw this layer's maps large (with --head: one map)."),
    ] = None,
    head: Annotated[int | None, typer.Option("--head", help="With --layer: the one head to draw.")] = None,
    checkpoint: CheckpointOpt = None,
    attention: Annotated[str | None, typer.Option("--attention", help="Backend to run the model with.")] = None,
    force_attention: ForceAttentionOpt = False,
    html: Annotated[
        bool,
        typer.Option("--html/--no-html", help="Also write the interactive tape.html."),
    ] = True,
    overwrite: OverwriteOpt = False,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = None,
) -> None:
    """Attention maps (layers x heads, token labels) and a self-contained interactive tape.html."""
    text = read_prompt(prompt, prompt_file)
    n_threads = set_threads(threads)
    where = choose_device(device)

    def on_loaded(loaded) -> None:
        plain_line(describe_loaded(loaded, where, n_threads, ("short",)))

    pictures = attention_pictures(
        run,
        text,
        out,
        layer,
        head,
        checkpoint,
        attention,
        html,
        force_attention,
        overwrite=overwrite,
        device=where,
        on_loaded=on_loaded,
    )
    for path in pictures:
        console.print(f"wrote {path}", highlight=False)


@viz_app.command(
    "positional",
    epilog=help_examples(
        "alilama viz positional --preset essay",
        "alilama viz positional --preset essay model.positional=rope --out rope.png",
    ),
)
def positional_cmd(
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    overrides: OverridesArg = None,
    out: Annotated[str, typer.Option("--out", "-o", help="PNG path.")] = "positional.png",
    distance: Annotated[
        int | None,
        typer.Option(
            "--distance", help="Largest distance drawn (default: the context length; at most MAX_VIZ_DISTANCE, 65,536)."
        ),
    ] = None,
) -> None:
    """Each head's positional term against distance, for the config's positional scheme."""
    from alilama_core.app.viz_draw import draw_positional

    if distance is not None and distance < 1:
        raise AlilamaError(f"--distance must be at least 1, got {distance}")
    if distance is not None and distance > limit("MAX_VIZ_DISTANCE"):
        raise AlilamaError(f"--distance {distance:,} is over its limit: {describe('MAX_VIZ_DISTANCE')}")
    cfg = resolve_config(config, preset, overrides)
    path = draw_positional(cfg.model, out, distance)
    console.print(f"wrote {path}", highlight=False)
