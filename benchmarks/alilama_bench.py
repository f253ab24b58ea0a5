"""Helpers shared by the benchmark suites: peak memory and result annotations."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

FULL = os.environ.get("ALILAMA_BENCH_FULL") == "1"
"""Full sizes for ``make bench``; CI runs every suite once on small sizes."""


def _fix_mmap_threshold() -> None:
    """Make glibc return large blocks to the OS on free (a fixed mmap threshold).

    By default glibc raises its mmap threshold after a large block is freed, so
    later allocations of that size are served from the heap and never show up
    again in the resident set: a warmed-up function would look free.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_MMAP_THRESHOLD = -3
        libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    except OSError:  # not glibc: measurements are then upper bounds only on first use
        pass


_fix_mmap_threshold()


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+)", f.read(), re.M).group(1))


def peak_memory_mib(fn: Callable[[], object]) -> float:
    """Peak resident memory that ``fn`` adds to the process, in MiB (Linux).

    Resets the kernel's high-water mark (``/proc/self/clear_refs``), runs ``fn``
    and reads the new mark. Counts every allocator (torch, Rust, C++), unlike
    Python's tracemalloc.
    """
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - base) / 1024
