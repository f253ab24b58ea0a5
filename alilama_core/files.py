"""Safe writes: atomic files (a temporary file in the same folder, fsync, then ``os.replace``) and exclusive folder locks.

A failed or interrupted write leaves the old file (if any) untouched and no
temporary file behind::

    with atomic_open("out/corpus.txt", "wb") as f:
        f.write(data)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from alilama_core.errors import AlilamaError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """Open a temporary file for writing that replaces ``path`` when the block succeeds."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        text = {"encoding": "utf-8", "newline": "\n"} if mode == "w" else {}
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


class FolderBusyError(AlilamaError):
    """Another process is writing the same output folder."""


@contextmanager
def exclusive_lock(folder: str | os.PathLike[str], what: str = "folder") -> Iterator[Path]:
    """Hold an exclusive, non-blocking lock on ``folder`` for the duration of the block.

    The lock lives beside the folder (``.NAME.lock``), so the folder itself can be
    replaced atomically while it is held. A second writer fails at once with the
    holder's PID instead of waiting or mixing files::

        with exclusive_lock("runs/essay", what="run"):
            ...  # write the run

    The lock is released when the block ends or the process dies (the operating
    system drops it); the small lock files stay behind and are harmless. A
    parent folder that cannot be written raises ``OutputError`` naming it.
    """
    from filelock import FileLock, Timeout

    from alilama_core.outputs import OutputError

    folder = Path(folder)
    lock_path = folder.parent / f".{folder.name}.lock"
    owner = folder.parent / f".{folder.name}.lock.pid"
    lock = FileLock(str(lock_path), timeout=0)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        try:
            holder = owner.read_text(encoding="utf-8").strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise FolderBusyError(
            f"{what} {str(folder)!r} is being written by another process (PID {holder}); "
            f"wait for it to finish or stop it, then try again"
        ) from None
    except OSError as exc:
        raise OutputError(f"cannot write the {what} {str(folder)!r}: {exc.strerror or exc}") from None
    try:
        owner.write_text(f"{os.getpid()}\n", encoding="utf-8")
        yield folder
    finally:
        lock.release()
