"""Hugging Face integration: transformers classes, Hub export and push, the model card.

Importing ``alilama_hf`` registers ``AlilamaConfig``, ``AlilamaModel``,
``AlilamaForCausalLM`` and ``AlilamaForSequenceClassification`` with
``AutoConfig``, ``AutoModel``, ``AutoModelForCausalLM`` and
``AutoModelForSequenceClassification``, so exported folders load without remote code where
Alilama is installed::

    import alilama_hf
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("out/")   # no trust_remote_code needed

transformers and torch take seconds to import and the plugin registry imports
this module whenever the CLI starts, so the registration waits for
transformers: it happens at once if transformers is already imported,
otherwise right after it is (an import hook, removed once it has run).
Commands added to the CLI: ``alilama export hf RUN OUT [--format auto|native|remote-code]`` and
``alilama push RUN --repo USER/NAME``.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import threading
import warnings
from typing import Annotated, Optional

from alilama_core.contracts.errors import AlilamaWarning
from alilama_core.contracts.hookspecs import hookimpl

__all__ = [
    "AlilamaConfig",
    "AlilamaForCausalLM",
    "AlilamaForSequenceClassification",
    "AlilamaModel",
    "AlilamaPreTrainedModel",
    "register_auto_classes",
]

_LAZY = {
    "AlilamaConfig": "alilama_hf.configuration_alilama",
    "AlilamaModel": "alilama_hf.modeling_alilama",
    "AlilamaForCausalLM": "alilama_hf.modeling_alilama",
    "AlilamaForSequenceClassification": "alilama_hf.modeling_alilama",
    "AlilamaPreTrainedModel": "alilama_hf.modeling_alilama",
}
_registered = False
_lock = threading.RLock()


def register_auto_classes() -> bool:
    """Register the classes with transformers' Auto classes (idempotent); False without transformers."""
    global _registered
    with _lock:
        if _registered:
            return True
        try:
            from transformers import (
                AutoConfig,
                AutoModel,
                AutoModelForCausalLM,
                AutoModelForSequenceClassification,
            )
        except ImportError:
            return False
        from alilama_hf.configuration_alilama import AlilamaConfig
        from alilama_hf.modeling_alilama import AlilamaForCausalLM, AlilamaForSequenceClassification, AlilamaModel

        AutoConfig.register(AlilamaConfig.model_type, AlilamaConfig, exist_ok=True)
        AutoModel.register(AlilamaConfig, AlilamaModel, exist_ok=True)
        AutoModelForCausalLM.register(AlilamaConfig, AlilamaForCausalLM, exist_ok=True)
        AutoModelForSequenceClassification.register(AlilamaConfig, AlilamaForSequenceClassification, exist_ok=True)
        _registered = True
        return True


_WATCHED = ("transformers", "alilama_hf.configuration_alilama", "alilama_hf.modeling_alilama")


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Calls ``_try_register`` after any watched module finishes importing, until it succeeds.

    Watching the class modules too covers the case where importing them is
    what first imports transformers (the classes do not exist yet then).
    """

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WATCHED or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _try_register(done=fullname)

        loader.exec_module = exec_module
        return spec


def _initializing(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _try_register(done: str = "") -> None:
    if _registered or "transformers" not in sys.modules:
        return
    if any(_initializing(n) for n in _WATCHED if n != done):
        return  # a class module is half-imported; its own completion retries
    try:
        register_auto_classes()
    except Exception as exc:  # never break the user's import of transformers
        warnings.warn(f"alilama_hf could not register its Auto classes: {exc}", AlilamaWarning, stacklevel=3)
    finally:
        if _hook in sys.meta_path:
            sys.meta_path.remove(_hook)


_hook = _RegisterAfterImport()

if "transformers" in sys.modules:
    _try_register()
elif importlib.util.find_spec("transformers") is not None:
    sys.meta_path.insert(0, _hook)


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        register_auto_classes()
        return getattr(module, name)
    raise AttributeError(f"module 'alilama_hf' has no attribute {name!r}")


# -- CLI ---------------------------------------------------------------------------------


@hookimpl
def register_commands(app):
    # typer reads the annotations at run time, with this function's locals: so no
    # ``from __future__ import annotations`` in this module.
    import typer

    from alilama_core.app.common import help_examples

    export_app = typer.Typer(
        help="Export a trained run to other formats.",
        no_args_is_help=True,
        epilog=help_examples("alilama export hf runs/essay out/essay-hf"),
    )

    @export_app.command(
        "hf",
        epilog=help_examples(
            "alilama export hf runs/essay out/essay-hf",
            "alilama export hf runs/essay out/essay-hf --format remote-code --force",
            "alilama export hf runs/essay out/essay-hf --repo-id you/essay --license mit",
            "alilama export hf runs/essay out/hf --check-with ~/venvs/hf4/bin/python",
        ),
    )
    def export_hf(
        run: Annotated[str, typer.Argument(help="Run folder (uses RUN/final, else the latest checkpoint).")],
        out: Annotated[str, typer.Argument(help="Folder to write (config.json, model.safetensors, tokenizer, card).")],
        format: Annotated[
            str,
            typer.Option(
                "--format",
                help="auto (a transformers architecture where exact, else remote code), native or remote-code.",
            ),
        ] = "auto",
        checkpoint: Annotated[
            Optional[str], typer.Option("--checkpoint", help="Checkpoint folder name, e.g. step-00001000.")
        ] = None,
        repo_id: Annotated[
            Optional[str], typer.Option("--repo-id", help="USER/NAME: the card's title and usage snippet.")
        ] = None,
        license: Annotated[
            Optional[str],
            typer.Option("--license", help="Hub license id for the card (mit, apache-2.0, ...); none by default."),
        ] = None,
        dataset: Annotated[
            Optional[list[str]], typer.Option("--dataset", help="Hub dataset id for the card (repeatable).")
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace an export that Alilama wrote in OUT (nothing else).")
        ] = False,
        check_with: Annotated[
            Optional[list[str]],
            typer.Option(
                "--check-with",
                help="Another Python (say, a venv with transformers 4.x) that must read the folder as Alilama "
                "computes it; repeatable. The installed transformers always checks it.",
            ),
        ] = None,
        progress: Annotated[
            bool,
            typer.Option(
                "--progress/--no-progress",
                help="A progress bar in a terminal (--no-progress, or outside a terminal: a line per step).",
            ),
        ] = True,
    ) -> None:
        """Write a Hugging Face model folder: AutoModelForCausalLM and AutoTokenizer load it."""
        from alilama_core.app.common import StepProgress
        from alilama_core.contracts.errors import AlilamaError

        try:
            from alilama_hf.export import EXPORT_STEPS, export, exported_format
        except ImportError as exc:
            raise AlilamaError(f"exporting needs the Hugging Face extras: pip install 'alilama[hf]' ({exc})") from None
        with StepProgress("export", EXPORT_STEPS, progress) as steps:
            path = export(
                run,
                out,
                checkpoint=checkpoint,
                repo_id=repo_id,
                license=license,
                datasets=dataset,
                overwrite=force,
                format=format,
                on_step=steps.next_done(),
                check_with=check_with,
            )
        files = ", ".join(sorted(p.name for p in path.iterdir() if not p.name.startswith(".")))
        typer.echo(f"exported {run} to {path} as {exported_format(path)}: {files}")
        if exported_format(path) != "remote-code":
            from pathlib import Path

            from alilama_core.engine.configs import load
            from alilama_hf.native import reader_notes

            for line in reader_notes(load(Path(run) / "config.yaml").model):
                typer.echo(f"note: {line} (docs/huggingface.md, Which tools read it)")
        if license is None:
            typer.echo("note: no --license given; the model card says so (add one before publishing)")

    @export_app.command(
        "gguf",
        epilog=help_examples(
            "alilama export gguf runs/essay out/essay.gguf",
            "alilama export gguf runs/essay out/q8.gguf --dtype q8_0 --modelfile",
            "alilama export gguf runs/essay out/e.gguf --check-with ~/llama/bin/python",
        ),
    )
    def export_gguf_cmd(
        run: Annotated[str, typer.Argument(help="Run folder (uses RUN/final, else the latest checkpoint).")],
        out: Annotated[str, typer.Argument(help="The GGUF file to write, e.g. out/essay.gguf.")],
        dtype: Annotated[
            str, typer.Option("--dtype", help="f32, f16 or q8_0 (matrices; norms and biases stay f32).")
        ] = "f32",
        checkpoint: Annotated[
            Optional[str], typer.Option("--checkpoint", help="Checkpoint folder name, e.g. step-00001000.")
        ] = None,
        modelfile: Annotated[
            bool, typer.Option("--modelfile", help="Also write an ollama Modelfile beside the GGUF file.")
        ] = False,
        force: Annotated[
            bool,
            typer.Option("--force", help="Replace a GGUF file (and an export's Modelfile) at OUT; nothing else."),
        ] = False,
        check_with: Annotated[
            Optional[list[str]],
            typer.Option(
                "--check-with",
                help="A Python with llama-cpp-python that must run the file as Alilama computes it; repeatable.",
            ),
        ] = None,
        progress: Annotated[
            bool,
            typer.Option("--progress/--no-progress", help="A progress bar in a terminal (else a line per step)."),
        ] = True,
    ) -> None:
        """Write a GGUF file for llama.cpp, ollama and LM Studio (see docs/sharing.md)."""
        from alilama_core.app.common import StepProgress
        from alilama_core.contracts.errors import AlilamaError

        try:
            import gguf  # noqa: F401
        except ImportError:
            raise AlilamaError("exporting GGUF needs the gguf package: pip install 'alilama[gguf]'") from None
        from alilama_hf.gguf_file import EXPORT_STEPS, export_gguf

        with StepProgress("export", EXPORT_STEPS, progress) as steps:
            info = export_gguf(
                run,
                out,
                dtype=dtype,
                checkpoint=checkpoint,
                modelfile=modelfile,
                overwrite=force,
                check_with=check_with,
                on_step=steps.next_done(),
            )
        typer.echo(f"exported {run} to {out} ({info['architecture']}, {dtype}) for llama.cpp")
        if "modelfile" in info:
            typer.echo(f"wrote {info['modelfile']}: ollama create NAME -f {info['modelfile']}")

    @export_app.command(
        "onnx",
        epilog=help_examples(
            "alilama export onnx runs/essay-nobias out/onnx --python ~/onnx/bin/python",
            "alilama export onnx runs/rope out/rope-onnx --force",
        ),
    )
    def export_onnx_cmd(
        run: Annotated[str, typer.Argument(help="Run folder (uses RUN/final, else the latest checkpoint).")],
        out: Annotated[
            str, typer.Argument(help="Folder to write: onnx/model.onnx, config.json, the tokenizer (transformers.js).")
        ],
        python: Annotated[
            Optional[str],
            typer.Option(
                "--python",
                help="A Python with optimum-onnx and onnxruntime (they need transformers < 4.58); default: this one.",
            ),
        ] = None,
        checkpoint: Annotated[
            Optional[str], typer.Option("--checkpoint", help="Checkpoint folder name, e.g. step-00001000.")
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace an ONNX export that Alilama wrote in OUT (nothing else).")
        ] = False,
        progress: Annotated[
            bool,
            typer.Option("--progress/--no-progress", help="A progress bar in a terminal (else a line per step)."),
        ] = True,
    ) -> None:
        """Write an ONNX folder for onnxruntime through optimum, checked against the run (see docs/sharing.md)."""
        from alilama_core.app.common import StepProgress
        from alilama_hf.onnx_export import EXPORT_STEPS, export_onnx

        with StepProgress("export", EXPORT_STEPS, progress) as steps:
            result = export_onnx(
                run, out, python=python, checkpoint=checkpoint, overwrite=force, on_step=steps.next_done()
            )
        typer.echo(f"exported {run} to {out} for onnxruntime: {', '.join(result['files'])}")

    app.add_typer(export_app, name="export")

    @app.command(
        "push",
        epilog=help_examples(
            "alilama push runs/essay --repo you/essay-alibi --license mit",
            "alilama push runs/essay --repo you/essay --private --revision step-1000",
        ),
    )
    def push_cmd(
        run: Annotated[str, typer.Argument(help="Run folder to export and upload.")],
        repo: Annotated[str, typer.Option("--repo", help="Hub repository, USER/NAME (created if missing).")],
        private: Annotated[bool, typer.Option("--private", help="Create the repository as private.")] = False,
        revision: Annotated[
            Optional[str], typer.Option("--revision", help="Branch to push to (created if missing).")
        ] = None,
        checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Checkpoint folder name.")] = None,
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
        """Export a run and upload it to the Hugging Face Hub with your usual token."""
        from alilama_core.contracts.errors import AlilamaError

        try:
            from alilama_hf.push import push
        except ImportError as exc:
            raise AlilamaError(f"pushing needs the Hugging Face extras: pip install 'alilama[hf]' ({exc})") from None
        from alilama_core.app.common import StepProgress
        from alilama_hf.export import EXPORT_STEPS

        with StepProgress("push", EXPORT_STEPS + 1, True) as steps:  # the export's steps, then the upload
            url = push(
                run,
                repo,
                private=private,
                revision=revision,
                checkpoint=checkpoint,
                license=license,
                datasets=dataset,
                format=format,
                on_step=steps.next_done(),
            )
        typer.echo(f"pushed {run} to https://huggingface.co/{repo}: {url}")
