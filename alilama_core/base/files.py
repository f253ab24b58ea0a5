"""Safe writes: atomic files (a temporary file in the same folder, fsync, then ``os.replace``), folders swapped in
whole, and exclusive folder locks.

A failed or interrupted write leaves the old file (if any) untouched and no
temporary file behind::

    with atomic_open("out/corpus.txt", "wb") as f:
        f.write(data)

A write that fails because the disk is full becomes one clear ``DiskFullError``
(where, how much is left, what to do), whichever library made the write::

    with disk_full_guard("runs/essay", "run folder", "run `alilama train --resume runs/essay`"):
        torch.save(state, "runs/essay/.step-00000004.tmp/optimizer.pt")
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from alilama_core.base.errors import DiskFullError, FolderBusyError, OutputError


def _umask() -> int:
    """The process's umask, read without changing it where the system can (``/proc``), so threads never race."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a plain ``open()`` gives a new file: ``0o666`` less the umask (``0o644`` under umask 022)."""
    return 0o666 & ~_umask()


def folder_mode() -> int:
    """The mode a plain ``mkdir()`` gives a new folder: ``0o777`` less the umask (``0o755`` under umask 022)."""
    return 0o777 & ~_umask()


def make_temp_folder(dir: str | os.PathLike[str], prefix: str, suffix: str = ".tmp") -> Path:
    """``tempfile.mkdtemp`` in ``dir`` with the user's usual folder mode (``mkdtemp`` alone makes 0700 folders)."""
    path = Path(tempfile.mkdtemp(dir=dir, prefix=prefix, suffix=suffix))
    os.chmod(path, folder_mode())
    return path


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
        os.chmod(tmp, file_mode())  # mkstemp makes 0600 files; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def replace_folder(new: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Put the finished folder ``new`` at ``out`` (beside it, on the same file system); an old ``out`` goes after.

    On Linux an existing ``out`` is exchanged with ``new`` in one step
    (``renameat2(RENAME_EXCHANGE)``), so a reader sees the old folder or the new
    one, never neither; elsewhere the old folder is first renamed aside, and put
    back if the second rename fails. The old folder is then removed::

        work = make_temp_folder(out.parent, prefix=f".{out.name}.")
        ...  # write into work
        replace_folder(work, out)
    """
    new, out = Path(new), Path(out)
    if not os.path.lexists(out):
        os.replace(new, out)
        return
    if _exchange(new, out):  # ``new`` now holds the old folder
        shutil.rmtree(new, ignore_errors=True)
        return
    aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.{os.getpid()}.", suffix=".tmp"))
    try:
        os.replace(out, aside / out.name)
        try:
            os.replace(new, out)
        except BaseException:
            os.replace(aside / out.name, out)  # put the old folder back
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with Linux's ``renameat2(RENAME_EXCHANGE)``; False where that is unavailable."""
    if sys.platform != "linux":
        return False
    try:
        import ctypes

        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without the wrapper (glibc before 2.28)
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


# -- a full disk --------------------------------------------------------------------------

DISK_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)
_QUOTA = getattr(errno, "EDQUOT", None)
_codes = "|".join(str(e) for e in sorted(DISK_FULL_ERRNOS))
# What wrappers say when they keep the reason only as text: Python's "[Errno 28] No space left on
# device" inside another message, Rust's io::Error (safetensors, tokenizers: "No space left on
# device (os error 28)", "StorageFull", "FilesystemQuotaExceeded"), Windows ("There is not enough
# space on the disk").
_FULL_TEXT = re.compile(
    rf"no space left on device|not enough space on the disk|storage ?full|no storage space"
    rf"|disk quota exceeded|filesystem ?quota ?exceeded|os error (?:{_codes})\b|errno (?:{_codes})\b",
    re.IGNORECASE,
)
_QUOTA_TEXT = re.compile(r"quota" + (rf"|os error {_QUOTA}\b|errno {_QUOTA}\b" if _QUOTA else ""), re.IGNORECASE)
# Short writes reported without a reason: torch's zip writer given a path ("[enforce fail at
# inline_container.cc:672] . unexpected pos 576 vs 534", "file write failed", "basic_ios::clear:
# iostream error") and numpy's tofile / save ("524288 requested and 262144 written").
_SHORT_WRITE = re.compile(
    r"unexpected pos \d+ vs \d+|file write failed|iostream error|\d+ requested and \d+ written", re.IGNORECASE
)
LOW_SPACE = 16 << 20
"""A short write counts as a full disk when less than this (and than 1% of its size) is left on the file system."""


def free_space(path: str | os.PathLike[str]) -> int | None:
    """Bytes this user may still write on the file system holding ``path`` (or its nearest existing parent)."""
    usage = _usage(path)
    return None if usage is None else usage.free


def _usage(path: str | os.PathLike[str]):
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p)
    except OSError:
        return None


def mount_point(path: str | os.PathLike[str]) -> Path:
    """The mount point of the file system holding ``path`` (or its nearest existing parent)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def disk_full_reason(exc: BaseException, path: str | os.PathLike[str] | None = None) -> str | None:
    """``"No space left on device"`` (or the quota's reason) when ``exc`` failed for a full disk, else ``None``.

    Looks through the exception's causes and contexts, for an ``OSError`` with
    ``ENOSPC``/``EDQUOT`` or a message that names one. A short write reported
    without a reason (torch's and numpy's writers) counts when the file system
    holding ``path`` has less than ``LOW_SPACE`` (and than 1% of its size)
    left; call this before the partial file is removed.
    """
    short, seen, todo = False, set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return os.strerror(e.errno)
        try:
            text = str(e)
        except Exception:  # a broken __str__ says nothing either way
            text = ""
        if _FULL_TEXT.search(text):
            return os.strerror(_QUOTA) if _QUOTA and _QUOTA_TEXT.search(text) else os.strerror(errno.ENOSPC)
        short = short or bool(_SHORT_WRITE.search(text))
        todo.append(e.__cause__)
        if not e.__suppress_context__:
            todo.append(e.__context__)
    if short and path is not None:
        usage = _usage(path)
        if usage is not None and usage.free < min(LOW_SPACE, usage.total // 100):
            return os.strerror(errno.ENOSPC)
    return None


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def disk_full_message(
    path: str | os.PathLike[str],
    reason: str,
    what: str = "output",
    then: str = "run the same command again",
    clean: bool = True,
) -> str:
    """One line: the disk is full while writing ``what`` ``path``, how much is left where, what to free, ``then``.

    ``clean``: the writer removed what it had half-written (say so).
    """
    free = free_space(path)
    left = f"{_size(free)} left" if free is not None else "no space left"
    quota = _QUOTA is not None and reason == os.strerror(_QUOTA)
    full = "your disk quota is full" if quota else "the disk is full"
    return (
        f"{full} ({reason}) while writing the {what} {str(path)!r} ({left} on the file system mounted at "
        f"{str(mount_point(path))!r}){'; nothing half-written was kept' if clean else ''}. Free space there "
        "(delete files you no longer need: old runs, checkpoints, exports, caches) or write to another disk, "
        f"then {then}"
    )


@contextmanager
def disk_full_guard(
    path: str | os.PathLike[str], what: str = "output", then: str | Callable[[], str] = "run the same command again"
) -> Iterator[None]:
    """Turn a failure of the block caused by a full disk into ``DiskFullError`` (see ``disk_full_message``).

    ``then``: what to do once space is freed (a callable is asked only when the disk is full).
    Other errors pass unchanged; put the guard inside the cleanup of partial files, so that
    a short write is recognised while the partial file still fills the disk.
    """
    try:
        yield
    except DiskFullError:
        raise
    except Exception as exc:  # an AlilamaError too: "cannot write the run folder ...: No space left on device"
        reason = disk_full_reason(exc, path)
        if reason is None:
            raise
        hint = then() if callable(then) else then
        raise DiskFullError(disk_full_message(path, reason, what, hint)) from exc


# -- locks ----------------------------------------------------------------------------------


@contextmanager
def exclusive_lock(folder: str | os.PathLike[str], what: str = "folder") -> Iterator[Path]:
    """Hold an exclusive, non-blocking lock on ``folder`` for the duration of the block.

    The lock (``filelock``) lives beside the folder, in ``.NAME.lock``, so the
    folder itself can be replaced atomically while it is held; the holder's PID
    is kept next to it, in ``.NAME.lock.pid``. A second writer fails at once with
    ``FolderBusyError`` naming that PID instead of waiting or mixing files::

        with exclusive_lock("runs/essay", what="run"):
            ...  # write the run

    The lock is released when the block ends or the process dies (the operating
    system drops it), and both files are removed on release. The holder removes
    the lock file *before* letting the lock go, and ``filelock`` refuses a lock
    taken on a file that is no longer at the path, so two holders never exist.
    A parent folder that cannot be written raises ``OutputError`` naming it.
    """
    from filelock import FileLock, Timeout  # only writers pay for importing it

    folder = Path(folder)
    lock_path = folder.parent / f".{folder.name}.lock"
    owner = folder.parent / f".{folder.name}.lock.pid"
    lock = FileLock(lock_path, timeout=0, fallback_to_soft=False)  # no flock: an OutputError, never a weaker lock
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise _busy(folder, what, _holder(owner)) from None
    except OSError as exc:
        raise OutputError(f"cannot write the {what} {str(folder)!r}: {exc.strerror or exc}") from None
    try:
        try:
            owner.write_text(f"{os.getpid()}\n", encoding="ascii")
        except OSError:  # the PID is a courtesy for the error message of a second writer
            pass
        yield folder
    finally:
        for path in (owner, lock_path):  # while still held (Windows: filelock removes the lock file itself)
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
        lock.release()


def _holder(owner: Path) -> str:
    try:
        return owner.read_text(encoding="ascii").strip() or "unknown"
    except (OSError, UnicodeDecodeError):
        return "unknown"


def _busy(folder: Path, what: str, holder: str) -> FolderBusyError:
    return FolderBusyError(
        f"{what} {str(folder)!r} is being written by another process (PID {holder}); "
        f"wait for it to finish or stop it, then try again"
    )
