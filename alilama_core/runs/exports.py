"""Export a run with any registered exporter: staging, read-back and the exactness check, once for all.

``export("gguf", RUN, OUT, dtype="q8_0", check_with=[PY])`` is what
``alilama export gguf RUN OUT --dtype q8_0 --check-with PY`` runs. For every
exporter (``contracts.exporter.Exporter``), a third party's as much as a
built-in one:

1. its options are checked against its declaration, and ``OUT`` (and each
   companion file) against the output rules (``outputs.check_export``), before
   the run is loaded;
2. the run is loaded with its hashes verified; a run trained with attention
   that is not exact, or a model ``problem()`` refuses, is refused by name;
3. under ``OUT``'s lock, the output is staged beside ``OUT`` (``outputs.building``
   for a folder, ``outputs.building_file`` for a file and its companions) and the
   exporter writes it;
4. the staged output is read back where the exporter reads (``reads_here``) and
   in each ``check_with`` Python, against the run's own logits, greedy ids and
   tokens (``write_expected``), within the exporter's ``tolerance()``; any
   difference fails the export and ``OUT`` stays as it was;
5. the output is renamed onto ``OUT``.

``on_step(text)`` is called ``export_steps(exporter)`` times: the run loaded,
each of the exporter's own ``steps``, the read-back.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alilama_core.base.errors import AlilamaError, UnsupportedError
from alilama_core.contracts.exporter import Exporter, Reading, Staging

PROBE_PROMPT = "Once upon a time, there was a little"
PROBE_NEW_TOKENS = 32
RESERVED_KINDS = ("run", "data", "viz")
"""Output kinds that are not exports: no exporter may be named so."""


@dataclass
class ExportResult:
    """What ``export`` did: the exporter (with its options), where it wrote, what it wrote, who read it."""

    exporter: Exporter
    out: Path
    info: dict[str, Any]
    readings: list[Reading] = field(default_factory=list)


def exporter_for(format: str, /, **options: Any) -> Exporter:
    """The registered exporter ``format`` with ``options`` checked (an unknown one is a ``ConfigError``)."""
    from alilama_core.engine.registry import get_exporter

    cls = get_exporter(format)
    if not (isinstance(cls, type) and issubclass(cls, Exporter)):
        raise AlilamaError(f"exporter {format!r} is {cls!r}, not an Exporter subclass (contracts.exporter)")
    return cls(**options)


def export_steps(exporter: Exporter | type[Exporter]) -> int:
    """How many times ``export`` calls ``on_step`` for ``exporter``."""
    return exporter.steps + 2


def declare_output(exporter: Exporter | type[Exporter]) -> str:
    """Make the output rules know what ``exporter`` writes (its name is its output kind); the kind."""
    from alilama_core.runs import outputs

    kind = exporter.name
    if not kind or kind in RESERVED_KINDS:
        raise AlilamaError(f"an exporter cannot be named {kind!r} (reserved: {', '.join(RESERVED_KINDS)})")
    if exporter.target not in ("file", "folder"):
        raise AlilamaError(f"exporter {kind!r} declares target {exporter.target!r}; it must be 'file' or 'folder'")
    outputs.NOUN.setdefault(kind, exporter.output_noun())
    if exporter.target == "file":
        if not exporter.magic:
            raise AlilamaError(f"exporter {kind!r} writes a file and declares no magic (the bytes it starts with)")
        outputs.FILES.setdefault(kind, exporter.magic)
    elif kind not in outputs.CONTENTS:
        outputs.CONTENTS[kind] = (outputs.MARKER, *exporter.contents, *outputs._TRANSIENT)
    return kind


def declared_target(model_config: Any, target: str) -> str | None:
    """The architecture the positional scheme of ``model_config`` declares for ``target`` (``gguf``, ``hf``), or None."""
    from alilama_core.contracts.exporter import scheme_target
    from alilama_core.engine.registry import get_positional

    return scheme_target(get_positional(model_config.positional), target)


def declared_targets(target: str) -> dict[str, str]:
    """Every registered positional scheme that declares an architecture for ``target`` -> that architecture."""
    from alilama_core.contracts.exporter import scheme_target
    from alilama_core.engine.registry import get_registry

    found = {}
    for name in get_registry().names("positional"):
        try:
            arch = scheme_target(get_registry().get("positional", name), target)
        except Exception:  # a scheme that does not import declares nothing here
            continue
        if arch:
            found[name] = arch
    return found


def require_exact_attention(run: Any, loaded: Any, reader: str) -> None:
    """Refuse a run trained with a backend that is not exact attention: every export computes the full softmax."""
    backend = loaded.model.backend
    if not backend.exact:
        raise UnsupportedError(
            f"cannot export {str(run)!r}: it was trained with attention backend {backend.name!r}, which is not "
            f"exact attention (it declares exact=False), and {reader} computes full causal attention, so its "
            "logits would not be the run's. Export runs trained with an exact backend"
        )


def probe_ids(m: Any, n: int = 48, rows: int = 2):
    """Fixed rows of token ids to compare logits on: ``(rows, min(n, context_length))``."""
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randint(0, m.vocab_size, (rows, min(n, m.context_length)), generator=g)


def write_expected(loaded: Any, path: str | os.PathLike[str], max_new_tokens: int = PROBE_NEW_TOKENS, rows: int = 2):
    """The run's own outputs, which every reader is compared with, as a safetensors file at ``path``.

    Tensors ``ids`` ``(B, T)`` and ``logits`` ``(B, T, V)``, ``prompt`` ``(P,)`` and
    ``greedy`` ``(N,)`` (the greedy continuation, cut before end-of-text); metadata
    ``max_new_tokens``, ``eot``, ``prompt_text`` and, where the tokenizer can spell
    every greedy id, ``greedy_text``.
    """
    import torch
    from safetensors.torch import save_file

    from alilama_core.engine.generation import SamplingSettings, generate, position_room

    model, tok = loaded.model, loaded.tokenizer
    ids = probe_ids(model.config, rows=rows)
    prompt = tok.encode(PROBE_PROMPT)
    room = position_room(model, len(prompt))
    n = max_new_tokens if room is None else min(max_new_tokens, room)
    greedy = generate(model, [prompt], SamplingSettings(max_new_tokens=n, temperature=0), eot_id=tok.eot_id)[0]
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(ids.to(device)).float().cpu()
    tensors = {
        "ids": ids,
        "logits": logits,
        "prompt": torch.tensor(prompt, dtype=torch.long),
        "greedy": torch.tensor(greedy, dtype=torch.long),
    }
    meta = {
        "max_new_tokens": str(n),
        "eot": "" if tok.eot_id is None else str(tok.eot_id),
        "prompt_text": PROBE_PROMPT,
    }
    if all(i < tok.vocab_size for i in greedy):  # a model wider than its tokenizer may pick ids it cannot spell
        meta["greedy_text"] = tok.decode(greedy)
    save_file(tensors, str(path), metadata=meta)


def read_back(
    exporter: Exporter, path: Path, expected: Path, check_with: Iterable[str] = (), here: bool | None = None
) -> list[Reading]:
    """Read ``path`` back here (where the exporter reads here) and under each ``check_with`` Python; raise on any
    difference from ``expected`` beyond the exporter's tolerance. Returns the readings."""
    readings: list[Reading] = []
    if exporter.reads_here if here is None else here:
        reading = exporter.read_back(path, expected, None)
        if reading is not None:
            readings.append(reading)
    for python in check_with:
        reading = exporter.read_back(path, expected, str(python))
        if reading is not None:
            readings.append(reading)
    tolerance = exporter.tolerance()
    for reading in readings:
        wrong = reading.failures(tolerance, exporter.greedy_must_match)
        if wrong:
            raise AlilamaError(exporter.mismatch(reading, wrong))
    return readings


def export(
    format: str | Exporter,
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    /,
    *,
    checkpoint: str | None = None,
    overwrite: bool = False,
    check_with: Iterable[str] | None = None,
    on_step: Callable[[str], None] | None = None,
    **options: Any,
) -> ExportResult:
    """Export ``run`` (its final weights, or ``checkpoint``) to ``out`` with the exporter ``format``.

    ``format`` is a registered name (``options`` are its declared options) or an
    ``Exporter`` instance. ``overwrite`` (``--overwrite``) replaces only an output this
    exporter wrote. See the module docstring for what is checked, and when.
    """
    from alilama_core.base.files import disk_full_guard, exclusive_lock
    from alilama_core.runs.checkpoint import load_run
    from alilama_core.runs.outputs import NOUN, building, building_file, check_export, follow_umask

    exporter = format if isinstance(format, Exporter) else exporter_for(format, **options)
    missing = exporter.check()
    if missing:
        raise AlilamaError(f"export {exporter.name}: {missing}")
    check_with = [str(p) for p in (check_with or [])]
    if check_with and not exporter.probe_file:
        raise AlilamaError(
            f"export {exporter.name} takes no --check-with: it declares no standalone reader (probe_file)"
        )
    step = on_step or (lambda text: None)
    out, run_path = Path(out), Path(run)
    kind = declare_output(exporter)
    exporter.validate(run_path)
    targets = {out: kind, **{path: k for k, path in exporter.companions(out).items()}}
    for target, what in targets.items():
        check_export(target, what, run, overwrite)  # before the run is loaded
    loaded = load_run(run, checkpoint=checkpoint)
    step(f"loaded {run} checkpoint {loaded.checkpoint.name}")
    require_exact_attention(run, loaded, exporter.reader or f"the {exporter.output_noun()}")
    problem = exporter.problem(loaded.config.model)
    if problem is not None:
        raise UnsupportedError(f"cannot export as {exporter.name}: {problem}")
    noun = NOUN[kind]
    lock_noun = exporter.busy_noun or noun  # how OUT is named while it is written
    with (
        tempfile.TemporaryDirectory(prefix="alilama-export-") as tmp,
        exclusive_lock(out, lock_noun),
        contextlib.ExitStack() as staged,
    ):
        for target, what in targets.items():
            check_export(target, what, run, overwrite)  # again, under the lock
        expected = Path(tmp) / "expected.safetensors"
        write_expected(loaded, expected)
        if exporter.target == "folder":
            path = staged.enter_context(building(out, kind, noun))
        else:
            path = staged.enter_context(building_file(out, noun))
        companions = {
            what: staged.enter_context(building_file(target, NOUN[what]))
            for target, what in targets.items()
            if target != out
        }
        staging = Staging(path=path, out=out, run=run_path, expected=expected, companions=companions)
        with disk_full_guard(out, lock_noun):  # inside the staging: a short write is judged while it is there
            info = exporter.write(loaded, staging, step) or {}
            readings = read_back(exporter, path, expected, check_with)
            step(exporter.checked_line(readings))
            if exporter.target == "folder":
                follow_umask(path)
    return ExportResult(exporter=exporter, out=out, info=dict(info), readings=readings)
