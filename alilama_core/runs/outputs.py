"""Output folders that Alilama writes, and the rules that keep a user's files safe.

Every folder Alilama writes (a run, a prepared data folder, the pictures of
``alilama viz attention``) carries a small
marker file, ``.alilama-output``, naming its kind. ``--overwrite`` replaces a
folder only when the marker says it is Alilama's own output of the same kind and
the folder holds nothing but the files Alilama writes there; it never replaces
an input of the same command. New output is built in a temporary folder beside
the target and swapped in with renames, so a failure leaves the old folder as
it was::

    check_output(out, "data", overwrite=True, inputs=[corpus, tokenizer_dir])
    work = new_folder_beside(out)
    ...                      # write into work
    mark(work, "data")
    swap_in(work, out)
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alilama_core.contracts.errors import OutputError
from alilama_core.contracts.files import make_temp_folder
from alilama_core.contracts.files import atomic_write_text

MARKER = ".alilama-output"

# What Alilama itself writes inside each kind of folder (glob patterns).
# Lock files of folders written inside (``.NAME.lock``) and temporary files count as Alilama's too.
_TRANSIENT = (".*.tmp", ".*.lock", ".*.lock.pid")
CONTENTS: dict[str, tuple[str, ...]] = {
    "run": (
        MARKER,
        "config.yaml",
        "run.json",
        "metrics.jsonl",
        "tokenizer",
        "step-*",
        "final",
        "*.png",
        "task-eval.json",
        "chat_template.jinja",  # the run's own chat template (alilama_core.engine.chat), written by its user
        "trackers",  # the loggers' own files (train.loggers), RUN/trackers/<name>
        *_TRANSIENT,
    ),
    "data": (MARKER, "meta.json", "train.bin", "val.bin", "tokenizer", *_TRANSIENT),
    "viz": (MARKER, "attention.png", "attention_l*_h*.png", "tape.html", *_TRANSIENT),
    "hf": (  # ``alilama export hf``
        MARKER,
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "configuration_alilama.py",
        "modeling_alilama.py",
        "attention_math.py",
        "positional_*.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "README.md",
        *_TRANSIENT,
    ),
    "onnx": (MARKER, "*.json", "*.onnx", "*.onnx_data", "*.txt", *_TRANSIENT),  # ``alilama export onnx`` (optimum)
}
# Folders written before markers existed are recognised by this file.
LEGACY_SIGNATURE = {"run": "config.yaml", "data": "meta.json"}
NOUN = {
    "run": "run",
    "data": "data folder",
    "viz": "set of attention pictures",
    "hf": "Hugging Face export",
    "onnx": "ONNX export",
}


def mark(folder: str | os.PathLike[str], kind: str) -> None:
    """Write the marker that makes ``folder`` recognisable as Alilama's ``kind`` output."""

    atomic_write_text(Path(folder) / MARKER, json.dumps({"kind": kind, "format": 1}) + "\n")


def kind_of(folder: str | os.PathLike[str]) -> str | None:
    """The kind named by ``folder``'s marker (``None``: no readable marker)."""
    try:
        return json.loads((Path(folder) / MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def foreign_entries(folder: Path, kind: str) -> list[str]:
    """Names in ``folder`` that Alilama does not write in a ``kind`` folder."""
    patterns = CONTENTS[kind]
    return sorted(p.name for p in folder.iterdir() if not any(fnmatch.fnmatch(p.name, pat) for pat in patterns))


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def check_writable_path(out: Path, what: str) -> None:
    """Refuse an output whose path runs through a file, or that is a file itself."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{what} {str(out)!r} is a file, not a folder; choose a folder path")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"cannot create {what} {str(out)!r}: {str(parent)!r} is a file, not a folder")
            try:  # the lock and the new folder are made beside the output: try writing there
                with tempfile.TemporaryFile(dir=parent, prefix=".alilama-probe-"):
                    pass
            except OSError as exc:
                raise OutputError(
                    f"cannot write {what} {str(out)!r}: {str(parent)!r} is not writable ({exc.strerror or exc})"
                ) from None
            break


def check_output(
    out: str | os.PathLike[str],
    kind: str,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    what: str | None = None,
) -> None:
    """Raise ``OutputError`` unless ``out`` may be written as a new ``kind`` folder.

    ``out`` may be missing or empty; an existing folder is replaced only with
    ``overwrite`` and only when it is Alilama's own ``kind`` output holding
    nothing else. ``out`` must not be, contain or lie inside one of ``inputs``.
    """
    out = Path(out)
    what = what or {"run": "run folder", "data": "data folder"}.get(kind, "output folder")
    resolved = out.resolve()
    for item in inputs:
        if str(item).startswith("hf:"):
            continue
        source = Path(item).resolve()
        if _overlaps(resolved, source):
            relation = "is" if resolved == source else ("lies inside" if source in resolved.parents else "contains")
            raise OutputError(
                f"{what} {str(out)!r} {relation} the input {str(item)!r}; writing there could destroy the input. "
                "Choose an --out outside the inputs"
            )
    check_writable_path(out, what)
    if not out.is_dir() or not any(out.iterdir()):
        return
    marked = kind_of(out)
    own = marked == kind or (marked is None and kind in LEGACY_SIGNATURE and (out / LEGACY_SIGNATURE[kind]).is_file())
    foreign = foreign_entries(out, kind) if own else []
    if not overwrite:
        if own:
            raise OutputError(
                f"{str(out)!r} already holds a {NOUN[kind]}; pass "
                + ("--resume to continue it, " if kind == "run" else "")
                + "--overwrite to replace it, or choose another --out"
            )
        raise OutputError(f"{str(out)!r} already exists and holds other files; choose another --out")
    if not own:
        holds = f"a {NOUN.get(marked, marked)}" if marked else "files Alilama did not write"
        raise OutputError(
            f"--overwrite replaces only a {NOUN[kind]} that Alilama wrote, and {str(out)!r} holds {holds}; "
            "nothing was deleted. Choose another --out"
        )
    if foreign:
        raise OutputError(
            f"{str(out)!r} holds files Alilama did not write ({', '.join(foreign[:5])}); --overwrite will not "
            "delete them. Move them away or choose another --out"
        )


def new_folder_beside(out: str | os.PathLike[str], what: str = "output") -> Path:
    """A fresh temporary folder in ``out``'s parent (same file system, so it can be renamed onto ``out``)."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return make_temp_folder(out.parent, prefix=f".{out.name}.")
    except OSError as exc:
        raise OutputError(f"cannot write the {what} {str(out)!r}: {exc.strerror or exc}") from None


def swap_in(work: Path, out: str | os.PathLike[str]) -> None:
    """Put the finished folder ``work`` at ``out``; an old ``out`` is removed only after the swap."""
    out = Path(out)
    if not out.exists():
        os.replace(work, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old.", suffix=".tmp"))
    os.replace(out, old / out.name)
    try:
        os.replace(work, out)
    except BaseException:
        os.replace(old / out.name, out)  # put the old folder back
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def clean_stale(folder: str | os.PathLike[str]) -> list[str]:
    """Remove temporary folders (``.*.tmp``) left in ``folder`` by killed writers; returns their names.

    Call it only while holding the folder's exclusive lock.
    """
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.glob(".*.tmp"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def stale_beside(out: str | os.PathLike[str]) -> list[Path]:
    """Temporary folders left beside ``out`` by killed writers of ``out``."""
    out = Path(out)
    if not out.parent.is_dir():
        return []
    return [p for p in out.parent.glob(f".{out.name}.*.tmp") if p.is_dir()]


@contextmanager
def building(out: str | os.PathLike[str], kind: str, what: str = "output") -> Iterator[Path]:
    """Write the ``kind`` folder ``out`` whole, or not at all: the one way Alilama writes an output folder.

    Removes what killed writers of ``out`` left beside it, yields a fresh folder
    beside ``out`` to fill, then marks it as ``kind`` and swaps it in (an old
    ``out`` is removed only after the swap). On any error, or an interrupt, the
    work folder is removed and ``out`` is as it was. Call it after
    ``check_output`` and under ``exclusive_lock(out)``::

        with exclusive_lock(out, "data folder"), building(out, "data", "data folder") as work:
            write_everything_into(work)
    """
    for stale in stale_beside(out):
        shutil.rmtree(stale, ignore_errors=True)
    work = new_folder_beside(out, what)
    try:
        yield work
        mark(work, kind)
        swap_in(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
