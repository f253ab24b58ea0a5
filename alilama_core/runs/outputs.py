"""Output folders that Alilama writes, and the rules that keep a user's files safe.

Every folder Alilama writes (a run, a prepared data folder, the pictures of
``alilama viz attention``) carries a small
marker file, ``.alilama-output``, naming its kind. ``--overwrite`` replaces a
folder only when the marker says it is Alilama's own output of the same kind and
the folder holds nothing but the files Alilama writes there; it never replaces
an input of the same command. New output is built in a temporary folder beside
the target and swapped in whole (``base.files.replace_folder``), so a failure
leaves the old folder as it was::

    check_output(out, "data", overwrite=True, inputs=[corpus, tokenizer_dir])
    with exclusive_lock(out, "data folder"), building(out, "data", "data folder") as work:
        ...                  # write into work

``alilama export`` writes folders (``hf``, ``onnx``) and files (``gguf``, the ollama
``Modelfile``) under one rule, ``check_export``: the output is never the run it
reads nor anything inside it, never inside another folder Alilama writes, and
``--overwrite`` replaces only what an export wrote there (a marked folder, or a regular
file that starts as such a file does), never a link, a device or a FIFO. Files are
written whole with ``building_file``. Temporaries beside an output are named
``.NAME.PID.XXXX.tmp``, so a later writer removes those whose process is gone.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alilama_core.base.errors import OutputError
from alilama_core.base.files import atomic_write_text, file_mode, folder_mode, make_temp_folder, replace_folder

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
    "onnx": (  # ``alilama export onnx`` (optimum): the model under onnx/, as transformers.js reads it
        MARKER,
        "onnx",
        "*.json",
        "*.onnx",
        "*.onnx_data",
        "*.txt",
        "chat_template.jinja",
        *_TRANSIENT,
    ),
}
FILES = {"gguf": b"GGUF", "modelfile": b"# ollama create"}
"""The files ``alilama export`` writes, by the bytes each starts with: ``--overwrite`` replaces only such a file."""


def _legacy_export(folder: Path) -> bool:
    """An export written before folders carried a marker: a config.json and Alilama's model card."""
    try:
        return (folder / "config.json").is_file() and "Alilama" in (folder / "README.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


# Folders written before markers existed, recognised by what they hold.
LEGACY = {
    "run": lambda folder: (folder / "config.yaml").is_file(),
    "data": lambda folder: (folder / "meta.json").is_file(),
    "hf": _legacy_export,
}
NOUN = {
    "run": "run",
    "data": "data folder",
    "viz": "set of attention pictures",
    "hf": "Hugging Face export",
    "onnx": "ONNX export",
    "gguf": "GGUF file",
    "modelfile": "ollama Modelfile",
}


def with_article(noun: str) -> str:
    """``noun`` with its indefinite article: "a run", "an ONNX export"."""
    return f"{'an' if noun[:1].lower() in 'aeio' else 'a'} {noun}"


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


def refuse_inputs(
    out: Path, inputs: Iterable[str | os.PathLike[str]], what: str, argument: str = "--out", noun: str = "input"
) -> None:
    """An output is never an input: refuse ``out`` when it is, contains or lies inside one of ``inputs``."""
    resolved = out.resolve()
    for item in inputs:
        if str(item).startswith("hf:"):
            continue
        source = Path(item).resolve()
        if _overlaps(resolved, source):
            relation = "is" if resolved == source else ("lies inside" if source in resolved.parents else "contains")
            raise OutputError(
                f"{what} {str(out)!r} {relation} the {noun} {str(item)!r}; writing there could destroy the {noun}. "
                f"Choose an {argument} outside it"
            )


def _check_parents(out: Path, what: str) -> None:
    """Refuse an output whose path runs through a file, or whose folder cannot be written."""
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


def check_writable_path(out: Path, what: str) -> None:
    """Refuse an output whose path runs through a file, or that is a file itself."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{what} {str(out)!r} is a file, not a folder; choose a folder path")
    _check_parents(out, what)


def check_output(
    out: str | os.PathLike[str],
    kind: str,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    what: str | None = None,
    option: str = "--overwrite",
    argument: str = "--out",
) -> None:
    """Raise ``OutputError`` unless ``out`` may be written as a new ``kind`` folder.

    ``out`` may be missing or empty; an existing folder is replaced only with
    ``overwrite`` and only when it is Alilama's own ``kind`` output holding
    nothing else. ``out`` must not be, contain or lie inside one of ``inputs``.
    ``option`` and ``argument`` are how the command spells overwriting and the
    output (``--overwrite`` and ``OUT`` for ``alilama export``), for the messages.
    """
    out = Path(out)
    what = what or {"run": "run folder", "data": "data folder"}.get(kind, "output folder")
    refuse_inputs(out, inputs, what, argument)
    check_writable_path(out, what)
    if not out.is_dir() or not any(out.iterdir()):
        return
    marked = kind_of(out)
    own = marked == kind or (marked is None and kind in LEGACY and LEGACY[kind](out))
    foreign = foreign_entries(out, kind) if own else []
    if not overwrite:
        if own:
            raise OutputError(
                f"{str(out)!r} already holds {with_article(NOUN[kind])}; pass "
                + ("--resume to continue it, " if kind == "run" else "")
                + f"{option} to replace it, or choose another {argument}"
            )
        raise OutputError(f"{str(out)!r} already exists and holds other files; choose another {argument}")
    if not own:
        holds = with_article(NOUN.get(marked, marked)) if marked else "files Alilama did not write"
        raise OutputError(
            f"{option} replaces only {with_article(NOUN[kind])} that Alilama wrote, and {str(out)!r} holds {holds}; "
            f"nothing was deleted. Choose another {argument}"
        )
    if foreign:
        raise OutputError(
            f"{str(out)!r} holds files Alilama did not write ({', '.join(foreign[:5])}); {option} will not "
            f"delete them. Move them away or choose another {argument}"
        )


_NOT_REGULAR = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}


def check_output_file(
    out: str | os.PathLike[str],
    kind: str,
    overwrite: bool = False,
    inputs: Iterable[str | os.PathLike[str]] = (),
    what: str | None = None,
    option: str = "--overwrite",
    argument: str = "--out",
) -> None:
    """Raise ``OutputError`` unless ``out`` may be written as a new ``kind`` file (``FILES``).

    ``out`` may be missing; an existing one is replaced only with ``overwrite``,
    and only when it is a regular file that is empty or starts as a ``kind`` file
    does: never a folder, a link, a device or a FIFO. ``out`` must not be or lie
    inside one of ``inputs``.
    """
    out = Path(out)
    what = what or NOUN[kind]
    refuse_inputs(out, inputs, what, argument)
    _check_parents(out, what)
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(f"cannot write {what} {str(out)!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise OutputError(f"{what} {str(out)!r} is a folder; give the path of the file to write (in it, say)")
    if not stat.S_ISREG(mode):
        raise OutputError(
            f"{what} {str(out)!r} is {_NOT_REGULAR.get(stat.S_IFMT(mode), 'not a regular file')}; "
            f"{option} replaces only a regular file, and nothing was changed. Choose another {argument}"
        )
    try:
        with open(out, "rb") as f:
            head = f.read(len(FILES[kind]))
    except OSError as exc:
        raise OutputError(f"cannot read {str(out)!r} to check what it is: {exc.strerror or exc}") from None
    own = head in (b"", FILES[kind])
    if not overwrite:
        raise OutputError(
            f"{str(out)!r} exists; "
            + (f"pass {option} to replace it, or " if own else "")
            + f"choose another {argument}"
        )
    if not own:
        raise OutputError(
            f"{option} replaces only {with_article(NOUN[kind])}, and {str(out)!r} is not one; nothing was deleted. "
            f"Choose another {argument}"
        )


def enclosing_output(path: str | os.PathLike[str]) -> tuple[Path, str] | None:
    """The nearest folder above ``path`` that Alilama marks as its output, and its kind (``None``: none)."""
    for parent in Path(path).resolve().parents:
        kind = kind_of(parent)
        if kind is not None:
            return parent, kind
    return None


def check_export(out: str | os.PathLike[str], kind: str, run: str | os.PathLike[str], force: bool = False) -> None:
    """The one check of every ``alilama export`` output (``hf``, ``onnx``: folders; ``gguf``, ``modelfile``: files).

    ``out`` is never the run it reads, nor inside it, nor inside another folder
    Alilama writes (a run, a data folder, an export: each holds only its own
    files); ``force`` (``--overwrite``) replaces only what an export wrote there.
    """
    out = Path(out)
    what = NOUN[kind]
    refuse_inputs(out, [run], what, "OUT", noun="run")
    inside = enclosing_output(out)
    if inside is not None:
        folder, holder = inside
        holder = with_article(NOUN.get(holder, holder))
        raise OutputError(
            f"{what} {str(out)!r} lies inside {str(folder)!r}, {holder} that holds only the files Alilama writes "
            "there; choose an OUT outside it"
        )
    check = check_output_file if kind in FILES else check_output
    check(out, kind, force, what=what, option="--overwrite", argument="OUT")


def _temp_prefix(out: Path) -> str:
    """How temporaries beside ``out`` begin: ``.NAME.PID.`` (``stale_beside`` reads the PID back)."""
    return f".{out.name}.{os.getpid()}."


def new_folder_beside(out: str | os.PathLike[str], what: str = "output") -> Path:
    """A fresh temporary folder in ``out``'s parent (same file system, so it can be renamed onto ``out``)."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return make_temp_folder(out.parent, prefix=_temp_prefix(out))
    except OSError as exc:
        raise OutputError(f"cannot write the {what} {str(out)!r}: {exc.strerror or exc}") from None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_stale(folder: str | os.PathLike[str]) -> list[str]:
    """Remove temporary folders (``.*.tmp``) left in ``folder`` by killed writers; returns their names.

    Call it only while holding the folder's exclusive lock.
    """
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.glob(".*.tmp"):
        _remove(path)
        removed.append(path.name)
    return removed


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (where that cannot be told, it counts as running)."""
    if pid == os.getpid() or os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        return True
    return True


def stale_beside(out: str | os.PathLike[str]) -> list[Path]:
    """Temporaries that writers of ``out`` left beside it and no running process owns.

    Writers name them ``.NAME.PID.XXXX.tmp``: one whose PID no longer runs was
    left by a killed writer. Older versions' ``.NAME.XXXX.tmp`` folders and
    ``.NAME.PID.checking`` files count as well.
    """
    out = Path(out)
    if not out.parent.is_dir():
        return []
    ours = re.compile(rf"\.{re.escape(out.name)}\.(?:(\d+)\.\w+\.tmp|(\d+)\.checking|(?:old\.)?\w+\.tmp)")
    stale = []
    for path in out.parent.iterdir():
        match = ours.fullmatch(path.name)
        if match is None:
            continue
        pid = match[1] or match[2]
        if pid is None or not _running(int(pid)):
            stale.append(path)
    return stale


def follow_umask(folder: str | os.PathLike[str]) -> None:
    """Give every file and folder in ``folder`` the mode a plain ``open()``/``mkdir()`` would (libraries that write
    through temporary files, such as safetensors, leave 0600 files)."""
    for path in [Path(folder), *Path(folder).rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, folder_mode() if path.is_dir() else file_mode())


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
        _remove(stale)
    work = new_folder_beside(out, what)
    try:
        yield work
        mark(work, kind)
        replace_folder(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


@contextmanager
def building_file(out: str | os.PathLike[str], what: str = "output") -> Iterator[Path]:
    """Write the file ``out`` whole, or not at all: ``building`` for a single file.

    Removes what killed writers of ``out`` left beside it and yields a new empty
    temporary file beside ``out`` (``.NAME.PID.XXXX.tmp``) to write; when the block
    succeeds it gets the user's usual file mode and is renamed onto ``out``. On any
    error, or an interrupt, it is removed and ``out`` is as it was. Call it after
    ``check_output_file`` and under ``exclusive_lock(out)``.
    """
    out = Path(out)
    for stale in stale_beside(out):
        _remove(stale)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=_temp_prefix(out), suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"cannot write the {what} {str(out)!r}: {exc.strerror or exc}") from None
    os.close(fd)
    work = Path(name)
    try:
        yield work
        os.chmod(work, file_mode())  # mkstemp makes 0600 files
        os.replace(work, out)
    finally:
        work.unlink(missing_ok=True)


def save_figure(fig, out: str | os.PathLike[str]) -> Path:
    """Write a matplotlib ``fig`` as a PNG atomically and close it; an unwritable path is a clear error."""
    import matplotlib.pyplot as plt

    from alilama_core.base.files import atomic_open

    out = Path(out)
    try:
        with atomic_open(out, "wb") as f:
            fig.savefig(f, format="png", bbox_inches="tight")
    except OSError as exc:
        raise OutputError(f"cannot write {str(out)!r}: {exc.strerror or exc}; choose a writable --out") from None
    finally:
        plt.close(fig)
    return out
