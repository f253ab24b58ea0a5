"""``alilama export FORMAT RUN OUT [options]`` over the registry's exporters, and ``alilama push``.

Each registered exporter (``contracts.exporter.Exporter``; the built-ins in
``alilama_exporters``, a third party's alike) is one ``FORMAT``: its options are
the ones it declares, beside the options every export takes (``--checkpoint``,
``--overwrite``/``--force``, ``--check-with`` where it has a standalone reader,
``--progress``). An option the format does not take is refused naming it and
what the format takes. The work is the library's (``alilama_core.runs.exports``).
``alilama push`` is the ``hf`` exporter's ``push`` (``Exporter.push``, behind ``uploads_to``).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import inspect

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from alilama_core.app.common import CheckpointOpt, ProgressOpt, examples, help_examples
from alilama_core.runs.outputs import with_article

COMMON = ("run", "out", "checkpoint", "overwrite", "check_with", "progress")


def _option_param(option) -> inspect.Parameter:
    """The parameter of one ``ExportOption`` (its value reaches the exporter under ``option.name``)."""
    if option.switch:
        kind, default = bool, option.default
    elif option.repeatable:
        kind, default = Optional[list[str]], None
    else:
        kind, default = Optional[str], option.default
    show = not option.switch and not option.repeatable and option.default is not None
    annotation = Annotated[kind, typer.Option(option.flag, help=option.help, show_default=show)]
    return inspect.Parameter(
        f"opt_{option.name}", inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


class _ExportCommand(TyperCommand):
    """One format's command: an option the format does not take is refused by name."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            if type(exc).__name__ == "NoSuchOption":  # typer's own click, or click
                takes = ", ".join(o for p in self.params for o in getattr(p, "opts", []) if o.startswith("--"))
                exc.message = f"export {self.name} does not take {exc.option_name}; it takes {takes}"
                exc.possibilities = None
            raise


def format_command(name: str):
    """The ``alilama export NAME`` command, built from the exporter's declaration."""
    from alilama_core.engine.registry import get_exporter

    cls = get_exporter(name)
    keyword = inspect.Parameter.KEYWORD_ONLY
    what = cls.output_noun()
    params = [
        inspect.Parameter(
            "run",
            keyword,
            annotation=Annotated[
                str, typer.Argument(metavar="RUN", help="Run folder (uses RUN/final, else the latest checkpoint).")
            ],
        ),
        inspect.Parameter(
            "out",
            keyword,
            annotation=Annotated[
                str,
                typer.Argument(metavar="OUT", help=f"The {'file' if cls.target == 'file' else 'folder'} to write."),
            ],
        ),
        inspect.Parameter("checkpoint", keyword, default=None, annotation=CheckpointOpt),
        inspect.Parameter(
            "overwrite",
            keyword,
            default=False,
            annotation=Annotated[
                bool,
                typer.Option(
                    "--overwrite",
                    "--force",
                    help=f"Replace {with_article(what)} that Alilama wrote at OUT (nothing else).",
                ),
            ],
        ),
    ]
    if cls.probe_file:
        help = f"Another Python that must read the output as Alilama computes it ({cls.probe_needs}); repeatable."
        params.append(
            inspect.Parameter(
                "check_with",
                keyword,
                default=None,
                annotation=Annotated[Optional[list[str]], typer.Option("--check-with", help=help)],
            )
        )
    params.append(inspect.Parameter("progress", keyword, default=True, annotation=ProgressOpt))
    params += [_option_param(option) for option in cls.options]

    def command(**values: Any) -> None:
        _export(name, **values)

    command.__signature__ = inspect.Signature(params)
    command.__doc__ = f"Write {cls.description or what}."
    sub = typer.Typer(add_completion=False)
    sub.command(name, cls=_ExportCommand, epilog=help_examples(*cls.examples) if cls.examples else None)(command)
    return typer.main.get_command(sub)


def _export(name: str, run: str, out: str, checkpoint, overwrite, progress, check_with=(), **values: Any) -> None:
    from alilama_core.app.common import StepProgress
    from alilama_core.runs.exports import export, export_steps, exporter_for

    options = {key.removeprefix("opt_"): value for key, value in values.items()}
    options = {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()}
    exporter = exporter_for(name, **options)
    with StepProgress("export", export_steps(exporter), progress) as steps:
        result = export(
            exporter,
            run,
            out,
            checkpoint=checkpoint,
            overwrite=overwrite,
            check_with=list(check_with or []),
            on_step=steps.next_done(),
        )
    for line in exporter.summary(run, result.out, result.info):
        typer.echo(line)


class _ExportGroup(TyperGroup):
    """``alilama export``: one command per registered exporter, built when asked for."""

    def list_commands(self, ctx) -> list[str]:
        from alilama_core.engine.registry import get_registry

        return sorted({*super().list_commands(ctx), *get_registry().names("exporter")})

    def get_command(self, ctx, name: str):
        from alilama_core.engine.registry import get_registry

        found = super().get_command(ctx, name)
        if found is not None or name not in get_registry().names("exporter"):
            return found
        try:
            return format_command(name)
        except Exception as exc:  # an exporter that does not import is shown, not fatal
            return _unavailable(name, f"{type(exc).__name__}: {exc}")


def _unavailable(name: str, message: str):
    """A command that says why the exporter ``name`` cannot be used here."""

    def command() -> None:
        from alilama_core.base.errors import AlilamaError

        raise AlilamaError(f"export {name} is unavailable: {message}")

    command.__doc__ = f"unavailable: {message}"
    sub = typer.Typer(add_completion=False)
    sub.command(name)(command)
    return typer.main.get_command(sub)


export_app = typer.Typer(
    cls=_ExportGroup,
    help="Export a trained run to another format: one FORMAT per registered exporter (alilama plugins lists them).",
    no_args_is_help=True,
    epilog=help_examples(
        "alilama export hf runs/essay out/essay-hf",
        "alilama export hf runs/essay out/essay-hf --format remote-code --overwrite",
        "alilama export gguf runs/essay out/q8.gguf --dtype q8_0 --modelfile",
        "alilama export gguf runs/essay out/e.gguf --check-with ~/llama/bin/python",
        "alilama export onnx runs/essay-nobias out/onnx --python ~/onnx/bin/python",
    ),
)


@examples(
    "alilama push runs/essay --repo you/essay-alibi --license mit",
    "alilama push runs/essay --repo you/essay --private --revision step-1000",
)
def push_cmd(
    run: Annotated[str, typer.Argument(help="Run folder to export and upload.")],
    repo: Annotated[str, typer.Option("--repo", help="Hub repository, USER/NAME (created if missing).")],
    private: Annotated[bool, typer.Option("--private", help="Create the repository as private.")] = False,
    revision: Annotated[
        Optional[str], typer.Option("--revision", help="Branch to push to (created if missing).")
    ] = None,
    checkpoint: CheckpointOpt = None,
    format: Annotated[
        str, typer.Option("--format", help="auto, native or remote-code (see `alilama export hf`).")
    ] = "auto",
    license: Annotated[
        Optional[str], typer.Option("--license", help="Hub license id for the model card; none by default.")
    ] = None,
    dataset: Annotated[
        Optional[list[str]], typer.Option("--dataset", help="Hub dataset id for the card (repeatable).")
    ] = None,
) -> None:
    """Export a run as a Hugging Face folder and upload it to the Hub with your usual token."""
    from alilama_core.app.common import StepProgress
    from alilama_core.runs.exports import export_steps, exporter_for

    exporter = exporter_for("hf", license=license, datasets=list(dataset or []), format=format)
    with StepProgress("push", export_steps(exporter) + 1, True) as steps:  # the export, then the upload
        url = exporter.push(
            run, repo, private=private, revision=revision, checkpoint=checkpoint, on_step=steps.next_done()
        )
    typer.echo(f"pushed {run} to https://huggingface.co/{repo}: {url}")
