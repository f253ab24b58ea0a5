"""What an exporter is: the ``Exporter`` contract (``alilama export FORMAT RUN OUT``).

An exporter writes a trained run in another program's format (a Hugging Face
folder, a GGUF file, an ONNX folder). It declares what it writes and for which
models, and writes it; everything around the writing is the core's
(``alilama_core.runs.exports``), the same for every exporter, a third party's
included:

1. the output rules (``runs.outputs.check_export``): never the run, never inside
   another Alilama output, ``--overwrite`` replaces only what this exporter wrote;
2. the run is loaded, its hashes verified, and a model the exporter cannot write
   is refused with ``problem(model_config)``'s reason, before anything is written;
3. ``write`` fills a staging folder or file beside ``OUT``;
4. the output is read back (``read_back``), in this Python where the exporter
   reads here and in each ``--check-with`` Python, and its logits are compared with
   the run's own within ``tolerance()``; greedy ids, text and token ids too, where
   the reader reports them;
5. only then is the staging output renamed onto ``OUT``.

A sketch::

    class NpzExporter(Exporter):
        name = "npz"
        description = "the weights as one numpy .npz file"
        target = "file"
        magic = b"PK"
        options = (ExportOption("compressed", "--compressed", False, "zip-compress the arrays"),)
        steps = 1
        probe_file = str(Path(__file__).with_name("probe_npz.py"))   # PYTHON probe_npz.py OUT EXPECTED

        def problem(self, model_config):
            return None if model_config.positional == "alibi" else "only ALiBi models"

        def write(self, loaded, staging, on_step):
            numpy.savez(staging.path, ...)
            on_step(f"wrote {staging.out.name}")
            return {}

Each built-in (``alilama_exporters``) is written exactly so; ``alilama_core.kit.check_exporter``
checks one against this contract.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from alilama_core.base.errors import ConfigError

Target = Literal["file", "folder"]
TARGETS = ("file", "folder")


@dataclass(frozen=True)
class ExportOption:
    """One option an exporter takes: ``alilama export FORMAT ... FLAG VALUE``, ``name=`` in Python.

    ``default`` decides the kind: a ``bool`` is a switch (``--modelfile``), a
    ``list`` a repeatable option (``--dataset A --dataset B``), anything else one
    value; ``choices`` limits a value to those listed.
    """

    name: str
    flag: str
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None

    @property
    def repeatable(self) -> bool:
        return isinstance(self.default, (list, tuple))

    @property
    def switch(self) -> bool:
        return isinstance(self.default, bool)


@dataclass
class Staging:
    """Where ``write`` writes: ``path`` (a new empty folder, or an empty file) and what it becomes.

    ``out`` is the final path (for names: a GGUF file's model name is ``out.stem``);
    ``companions`` maps each companion file the exporter declared (``companions()``)
    to its own staging file; ``expected`` is the run's outputs that the readers are
    compared with (``write_expected``), for an exporter whose writing runs a reader.
    """

    path: Path
    out: Path
    run: Path
    expected: Path
    companions: dict[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class Reading:
    """What a reader computed from the written output, against the run's own outputs.

    ``max_logit_diff``: the largest absolute logit difference on the probe ids;
    ``greedy_equal``, ``text_equal``, ``tokenizer_equal``: ``None`` when not compared.
    ``reader`` names it with its version (``"transformers 4.57.1"``), ``where`` the
    Python it ran in (``"this Python"`` or a ``--check-with`` path).
    """

    reader: str
    max_logit_diff: float
    greedy_equal: bool | None = None
    text_equal: bool | None = None
    tokenizer_equal: bool | None = None
    where: str = "this Python"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def failures(self, tolerance: float, greedy_must_match: bool = True) -> list[str]:
        """What differs from the run (empty: nothing), ``tolerance`` being the exporter's."""
        wrong = []
        if not self.max_logit_diff <= tolerance:  # NaN fails too
            wrong.append(f"logits differ by {self.max_logit_diff:.2e} (more than {tolerance:g})")
        checks = [("tokenizer_equal", "token ids"), ("text_equal", "greedy text")]
        if greedy_must_match:
            checks.insert(0, ("greedy_equal", "greedy ids"))
        for key, what in checks:
            if getattr(self, key) is False:
                wrong.append(f"its {what} differ")
        return wrong

    def line(self) -> str:
        """``transformers 4.57.1 (this Python): logits within 1.2e-06, greedy ids equal``."""
        if self.text_equal:
            greedy = ", greedy text equal"
        elif self.greedy_equal is None:
            greedy = ""
        else:
            greedy = ", greedy ids equal" if self.greedy_equal else ", greedy ids differ"
        return f"{self.reader} ({self.where}): logits within {self.max_logit_diff:.1e}{greedy}"


class Exporter(abc.ABC):
    """A format Alilama writes a run in. Subclass it, and register it with ``register_exporters``.

    Declared on the class: ``name`` (the format, ``alilama export NAME``),
    ``description`` (one line), ``target`` (``"file"`` or ``"folder"``), what
    the output holds (``contents``: glob patterns of a folder's files;
    ``magic``: the bytes a file starts with), so that ``--overwrite`` replaces only
    what this exporter wrote, ``options`` (``ExportOption``), ``steps`` (how
    many times ``write`` calls ``on_step``), and how it is read back:
    ``reads_here`` (``read_back`` runs in this Python), ``probe_file`` (a
    standalone script, ``PYTHON probe_file OUT EXPECTED``, that prints one JSON
    object as its last line, run by ``--check-with PYTHON``) with ``probe_needs``
    (what that Python needs), and ``tolerance()``.

    The instance holds its options, checked against the declaration
    (``self.options``, by ``name``). Optional: ``push`` (``alilama push``),
    behind ``uploads_to``.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    target: ClassVar[Target] = "folder"
    noun: ClassVar[str] = ""
    """What the output is called in messages ("GGUF file"); default: "NAME export"/"NAME file"."""
    busy_noun: ClassVar[str] = ""
    """What ``OUT`` is called while it is written (a full disk, another export holding it); default: ``noun``."""
    contents: ClassVar[tuple[str, ...]] = ()
    magic: ClassVar[bytes] = b""
    options: ClassVar[tuple[ExportOption, ...]] = ()
    steps: ClassVar[int] = 1
    reader: ClassVar[str] = ""
    """The program that reads the output (for messages): "transformers", "llama.cpp"."""
    reads_here: ClassVar[bool] = False
    probe_file: ClassVar[str | None] = None
    probe_needs: ClassVar[str] = ""
    examples: ClassVar[tuple[str, ...]] = ()
    """Command lines ``alilama export NAME --help`` shows."""
    greedy_must_match: ClassVar[bool] = True
    """Whether a reader's greedy ids must equal the run's (quantised formats may pick other ties)."""
    uploads_to: ClassVar[str] = ""
    """Where ``push`` uploads this format ("the Hugging Face Hub"); empty when it uploads nowhere."""

    def __init__(self, **options: Any) -> None:
        self.options: dict[str, Any] = self.check_options(options)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """The declared options' defaults with ``options`` applied; an unknown one is a ``ConfigError``."""
        declared = {o.name: o for o in cls.options}
        unknown = [k for k in options if k not in declared]
        if unknown:
            takes = ", ".join(o.flag for o in cls.options) or "no options of its own"
            raise ConfigError(f"export {cls.name} does not take {', '.join(map(repr, unknown))}; it takes {takes}")
        checked = {}
        for name, option in declared.items():
            value = options.get(name, option.default)
            if value is None and option.repeatable:
                value = []
            if option.choices is not None and value not in option.choices:
                raise ConfigError(f"{option.flag} must be one of {', '.join(option.choices)}, got {value!r}")
            checked[name] = list(value) if option.repeatable else value
        return checked

    @classmethod
    def output_noun(cls) -> str:
        return cls.noun or f"{cls.name} {'file' if cls.target == 'file' else 'export'}"

    @classmethod
    def check(cls) -> str | None:
        """Why this exporter cannot run in this installation (a missing library and how to install it), or ``None``."""
        return None

    def push(
        self,
        run: str | Path,
        repo: str,
        *,
        private: bool = False,
        revision: str | None = None,
        checkpoint: str | None = None,
        on_step: Callable[[str], None] | None = None,
    ) -> str:
        """Optional (``uploads_to``): export ``run`` with these options and upload it to ``repo``; its URL.

        ``alilama push`` calls it. ``repo`` (and what else can be checked
        quickly: a token, the network) is checked before anything is exported,
        and refused with an ``AlilamaError`` saying what is wrong. ``on_step``
        is called after each of the export's steps (``export_steps``), then
        once before the upload; ``private`` and ``revision`` (a branch, created
        if missing) apply to a repository the upload creates or writes to.
        """
        from alilama_core.base.errors import UnsupportedError

        raise UnsupportedError(f"export {self.name} uploads nowhere (it does not declare uploads_to)")

    def companions(self, out: Path) -> dict[str, Path]:
        """Files written beside ``out`` with it (kind -> path; each kind must be a ``FILES`` kind of the output
        rules or declared by the exporter). Default: none."""
        return {}

    def validate(self, run: Path) -> None:
        """Check the options against each other and the run's path, before the run is loaded (raise to refuse)."""
        return None

    @abc.abstractmethod
    def problem(self, model_config: Any) -> str | None:
        """Why this format cannot hold a model of ``model_config`` (a ``ModelConfig``), or ``None`` if it can.

        Called before anything is written; the reason is shown as it is, after
        "cannot export as NAME:", so it names what the format lacks.
        """

    @abc.abstractmethod
    def write(self, loaded: Any, staging: Staging, on_step: Callable[[str], None]) -> dict[str, Any]:
        """Write ``loaded`` (a ``LoadedRun``) into ``staging.path``; call ``on_step`` ``steps`` times.

        Returns what was written (shown by the command, kept in the result).
        """

    def tolerance(self) -> float:
        """The largest logit difference from the run accepted from a reader (with these options)."""
        return 1e-4

    def read_back(self, path: Path, expected: Path, python: str | None = None) -> Reading | None:
        """Read the output at ``path`` as its reader does and compare it with ``expected``.

        ``python`` ``None``: in this Python (called when ``reads_here``); else run
        ``probe_file`` under that interpreter (``--check-with``). The default runs
        the probe file in either case and builds a ``Reading`` from its JSON
        (``reading_from``).
        """
        from alilama_core.base.errors import AlilamaError

        if not self.probe_file:
            raise AlilamaError(f"export {self.name} has no reader to check its output with (no probe_file)")
        import sys

        result = run_probe(
            python or sys.executable,
            [str(self.probe_file), str(path), str(expected)],
            where=f"--check-with {python}" if python else "this Python",
            failed=f"{self.reader or 'its reader'} did not read the output",
            hint=f"that Python needs {self.probe_needs}" if self.probe_needs else "",
        )
        return self.reading_from(result, where=python or "this Python")

    def reading_from(self, result: Mapping[str, Any], where: str) -> Reading:
        """A ``Reading`` from a probe's JSON (keys ``reader``, ``max_logit_diff`` and the optional ``*_equal``)."""
        return Reading(
            reader=str(result.get("reader", self.reader)),
            max_logit_diff=float(result["max_logit_diff"]),
            greedy_equal=result.get("greedy_equal"),
            text_equal=result.get("text_equal"),
            tokenizer_equal=result.get("tokenizer_equal"),
            where=where,
            raw=dict(result),
        )

    def mismatch(self, reading: Reading, wrong: list[str]) -> str:
        """The error when a reader's output differs from the run (``wrong``: what differs)."""
        return f"the {self.output_noun()}, read by {reading.reader} ({reading.where}), is not the run's model: {'; '.join(wrong)}"

    def checked_line(self, readings: list[Reading]) -> str:
        """The progress line after the read-back (``readings``: empty when none ran)."""
        if not readings:
            return "not read back (--check-with PYTHON reads it where its reader is installed)"
        return "read it back: " + "; ".join(r.line() for r in readings)

    def summary(self, run: str, out: Path, info: Mapping[str, Any]) -> list[str]:
        """The lines the command prints when the export is done."""
        return [f"exported {run} to {out} as {self.name}"]


PROBE_TIMEOUT_S = 600


def run_probe(
    python: str, argv: list[str], *, where: str, failed: str, hint: str = "", timeout: int = PROBE_TIMEOUT_S
) -> dict[str, Any]:
    """Run a standalone file (``argv``: its path, then its arguments) under ``python``; the JSON of its last line.

    ``where`` names the option that chose the Python (``--check-with PY``), for the errors;
    ``failed`` says what did not work when the file exits non-zero; ``hint`` what that Python needs.
    """
    import os
    import subprocess

    from alilama_core.base.errors import AlilamaError

    try:
        proc = subprocess.run(
            [python, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AlilamaError(f"{where}: could not run it ({exc})") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise AlilamaError(f"{where}: {failed}: {tail}" + (f" ({hint})" if hint else ""))
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise AlilamaError(f"{where}: {failed}: it printed no JSON result") from None


def scheme_target(scheme: type, target: str) -> str | None:
    """What the positional scheme class ``scheme`` declares it is in ``target`` (``export_targets``), or ``None``."""
    declared = getattr(scheme, "export_targets", None) or {}
    value = declared.get(target)
    return value if isinstance(value, str) and value else None


def undeclared(positional: str, scheme: type, target: str, reader: str, declared: Mapping[str, str]) -> str:
    """The reason a scheme that declares nothing for ``target`` is refused, naming it and what to declare."""
    schemes = ", ".join(f"{k} ({v})" for k, v in sorted(declared.items())) or "none"
    return (
        f"positional scheme {positional!r} has no {reader} architecture: its class "
        f"({scheme.__module__}.{scheme.__name__}) declares no {target!r} in its export_targets (these do: {schemes}). "
        "A scheme that computes what one "
        f"of them computes declares it on its class, e.g. export_targets = {{{target!r}: ...}}"
    )
