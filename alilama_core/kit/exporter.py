"""The conformance kit for an exporter plugin (``contracts.exporter``, ``alilama export NAME``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from alilama_core.base.errors import AlilamaError, ConfigError
from alilama_core.contracts.exporter import TARGETS, Exporter, ExportOption
from alilama_core.kit.common import TRICKY_TEXTS, Check, Subject, _fail, _scope, _scoped, run_checks, tiny_model_config

RESERVED_OPTIONS = ("run", "out", "checkpoint", "overwrite", "check_with", "on_step", "progress")
"""Names the export command and ``runs.exports.export`` use themselves: no exporter option may take them."""
STORY = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park. They played until the stars came out. "
)


def tiny_run(folder: str | Path, tokenizer: str = "bpe", **model: Any) -> Path:
    """A run folder with a fresh tiny model (``tiny_model_config(**model)``) and a small BPE tokenizer, at ``folder``.

    What an exporter is checked on: config.yaml, tokenizer/, final/model.safetensors (no training,
    no run.json: a folder assembled by hand, as ``load_run`` reads one).
    """
    import torch

    from alilama_core.contracts.config import Config
    from alilama_core.engine.configs import save
    from alilama_core.engine.model import build_model
    from alilama_core.engine.registry import get_tokenizer
    from alilama_core.runs.checkpoint import save_weights
    from alilama_core.runs.tokenizers import save_tokenizer

    folder = Path(folder)
    tok = get_tokenizer(tokenizer).train([STORY * 3, *TRICKY_TEXTS], vocab_size=300, special_tokens=["<|endoftext|>"])
    settings = {"context_length": 32, "vocab_size": tok.vocab_size, **model}
    cfg = tiny_model_config(**settings)
    torch.manual_seed(0)
    net = build_model(cfg).eval()
    save_weights(net, folder / "final")
    save(Config(model=cfg), folder / "config.yaml")
    save_tokenizer(tok, folder / "tokenizer", kind=tokenizer)
    return folder


def check_exporter(
    exporter: str | type,
    *,
    options: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    run: str | Path | None = None,
    check_with: Iterable[str] = (),
    known_gaps: Mapping[str, str] | None = None,
) -> list[str]:
    """Check an exporter (registered name or ``Exporter`` subclass) against its contract; the checks run.

    Checked: what it declares (a name, a target of ``file`` or ``folder`` with the
    ``magic`` or ``contents`` that let ``--overwrite`` recognise its output, options with
    ``--flags`` and names the command does not use itself); an unknown option is
    refused by name; ``problem()`` answers ``None`` or a reason for a model it is
    given; and a whole export of a tiny run (``run``: one of yours instead; ``model``:
    ``ModelConfig`` fields for the tiny one) through the core (``runs.exports``):
    ``write`` calls ``on_step`` ``steps`` times, the output is read back within the
    exporter's own tolerance (here where it ``reads_here``, and under each
    ``check_with`` Python), lands at ``OUT`` whole and is recognised as its own by
    the output rules (a second export refuses it without ``overwrite`` and replaces it
    with it)::

        def test_npz():
            check_exporter("npz", options={"compressed": True})
    """
    return run_checks(
        exporter_checks(exporter, options=options, model=model, run=run, check_with=check_with, known_gaps=known_gaps)
    )


def exporter_checks(
    exporter: str | type,
    *,
    options: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    run: str | Path | None = None,
    check_with: Iterable[str] = (),
    known_gaps: Mapping[str, str] | None = None,
) -> list[Check]:
    """The named checks of ``check_exporter``, one ``Check`` each (see ``parametrize_with_checks``)."""
    name, scope = _scope("exporter", exporter)
    what = f"exporter {name!r}"
    options = dict(options or {})
    check_with = [str(p) for p in check_with]
    gaps = dict(known_gaps or {})

    def cls() -> type:
        from alilama_core.engine.registry import get_exporter

        found = get_exporter(name)
        if not (isinstance(found, type) and issubclass(found, Exporter)):
            raise _fail(what, f"is registered as {found!r}, not an Exporter subclass (contracts.exporter)")
        return found

    def made_run() -> Path:
        if run is not None:
            return Path(run)
        folder = Path(tempfile.mkdtemp(prefix="alilama-kit-exporter-")) / "run"
        return tiny_run(folder, **dict(model or {}))

    subject = Subject(cls=cls, run=made_run)

    def declaration() -> None:
        c = subject.cls
        if not isinstance(c.name, str) or not c.name:
            raise _fail(what, "declares no name (the class attribute name, the FORMAT of alilama export)")
        if c.target not in TARGETS:
            raise _fail(what, f"declares target {c.target!r}; it must be one of {', '.join(TARGETS)}")
        if c.target == "file" and not (isinstance(c.magic, bytes) and c.magic):
            raise _fail(what, "writes a file but declares no magic (the bytes its files start with)")
        if c.target == "folder" and not all(isinstance(p, str) and p for p in c.contents):
            raise _fail(what, "declares contents that are not glob patterns")
        if not (isinstance(c.steps, int) and c.steps >= 0):
            raise _fail(what, f"declares steps={c.steps!r}; it must be how many times write calls on_step")
        for option in c.options:
            if not isinstance(option, ExportOption):
                raise _fail(what, f"declares an option {option!r} that is not an ExportOption")
            if not option.flag.startswith("--") or not option.name.isidentifier():
                raise _fail(what, f"option {option.name!r} needs a Python name and a --flag, got {option.flag!r}")
            if option.name in RESERVED_OPTIONS:
                raise _fail(what, f"option {option.name!r} takes a name the export command uses itself")
        if c.probe_file is not None and not Path(c.probe_file).is_file():
            raise _fail(what, f"declares probe_file {c.probe_file!r}, which is not a file")
        if check_with and not c.probe_file:
            raise _fail(what, "was given check_with Pythons but declares no probe_file to run there")

    def unknown_option() -> None:
        from alilama_core.runs.exports import exporter_for

        try:
            exporter_for(name, **options, no_such_option_for_the_kit=1)
        except ConfigError as exc:
            if "no_such_option_for_the_kit" not in str(exc):
                raise _fail(what, f"refused an unknown option without naming it: {exc}") from None
            return
        raise _fail(what, "accepted an option it does not declare")

    def problem() -> None:
        from alilama_core.engine import configs as cfgmod

        config = cfgmod.load(subject.run / "config.yaml").model
        answer = subject.cls(**options).problem(config)
        if answer is not None and not (isinstance(answer, str) and answer):
            raise _fail(what, f"problem() must return None or a reason, got {answer!r}")
        if answer is not None:
            raise _fail(what, f"refuses the tiny model it is checked on ({answer}); pass model= settings it writes")

    def export_reads_back() -> None:
        from alilama_core.runs.exports import export, export_steps
        from alilama_core.runs.outputs import FILES, kind_of

        steps: list[str] = []
        with tempfile.TemporaryDirectory(prefix="alilama-kit-export-") as tmp:
            out = Path(tmp) / ("export.out" if subject.cls.target == "file" else "export")
            try:
                result = export(name, subject.run, out, check_with=check_with, on_step=steps.append, **options)
            except AlilamaError as exc:
                raise _fail(what, f"the export failed: {exc}") from None
            if len(steps) != export_steps(subject.cls):
                raise _fail(
                    what,
                    f"declares steps={subject.cls.steps}, but write called on_step {len(steps) - 2} times: {steps}",
                )
            if subject.cls.reads_here or check_with:
                if not result.readings:
                    raise _fail(what, "reads its output back but returned no Reading")
            kind = subject.cls.name  # the output kind: the class's name (a class checked unregistered has another)
            if subject.cls.target == "file":
                if not out.is_file() or out.read_bytes()[: len(FILES[kind])] != FILES[kind]:
                    raise _fail(what, f"wrote no file starting with its magic {subject.cls.magic!r} at OUT")
            elif not out.is_dir() or kind_of(out) != kind:
                raise _fail(what, "wrote no folder at OUT marked as its own output")
            try:
                export(name, subject.run, out, **options)
            except AlilamaError:
                pass
            else:
                raise _fail(what, "replaced an existing output without overwrite")
            try:
                export(name, subject.run, out, overwrite=True, **options)
            except AlilamaError as exc:
                raise _fail(what, f"could not replace its own output with overwrite: {exc}") from None

    def push_refuses_a_bad_destination() -> None:
        from alilama_core.runs.exports import exporter_for

        steps: list[str] = []
        try:
            exporter_for(name, **options).push(subject.run, "", on_step=steps.append)
        except AlilamaError:
            pass
        else:
            raise _fail(what, "push() accepted an empty repository name")
        if steps:
            raise _fail(what, f"push() exported before it refused an empty repository name: {steps}")

    with scope():
        uploads = _declares_uploads(name)
    plan = [
        ("declaration", declaration, None),
        ("unknown option refused", unknown_option, None),
        ("problem() answers", problem, None),
        ("export reads back", export_reads_back, None),
        ("push refuses a bad destination", push_refuses_a_bad_destination, None if uploads else "no uploads_to"),
    ]
    return [
        Check("exporter", name, check, _scoped(scope, fn), skip=skip, gap=gaps.get(check)) for check, fn, skip in plan
    ]


def _declares_uploads(name: str) -> bool:
    """Whether the exporter ``name`` declares ``uploads_to`` (one that does not import: no, its checks say why)."""
    from alilama_core.engine.registry import get_exporter

    try:
        return bool(getattr(get_exporter(name), "uploads_to", ""))
    except AlilamaError:
        return False
