"""Helpers shared by the benchmark suites: peak memory and result annotations."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

FULL = os.environ.get("ALILAMA_BENCH_FULL") == "1"
"""Full sizes for ``make bench``; CI runs every suite once on small sizes."""


_M_MMAP_THRESHOLD = -3
_MEASURING_THRESHOLD = 128 * 1024
"""While memory is measured, every block over 128 KiB is mapped fresh and unmapped on free."""
_STEADY_THRESHOLD = 32 * 2**20
"""Afterwards: glibc's own ceiling for its sliding threshold, where a warmed-up process ends up."""


def _libc():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: memory figures are then upper bounds only on first use
        return None


def _measuring_allocations(on: bool) -> None:
    """Make glibc show every large allocation in the resident set (``on``), or behave as a warm process.

    By default glibc raises its mmap threshold after a large block is freed, so
    later allocations of that size come from memory it already holds and never
    show up again in the resident set: a warmed-up function would look free. A
    fixed low threshold plus ``malloc_trim`` makes each one count, but it also
    makes every large allocation fault in fresh pages, which slows
    allocation-heavy code severalfold, so it holds only while memory is being
    measured and never while time is.
    """
    libc = _libc()
    if libc is None:
        return
    if on:
        libc.malloc_trim(0)  # hand back what freed blocks hold, so that reusing them counts again
    libc.mallopt(_M_MMAP_THRESHOLD, _MEASURING_THRESHOLD if on else _STEADY_THRESHOLD)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+)", f.read(), re.M).group(1))


def peak_memory_mib(fn: Callable[[], object]) -> float:
    """Peak resident memory that ``fn`` adds to the process, in MiB (Linux).

    Resets the kernel's high-water mark (``/proc/self/clear_refs``), runs ``fn``
    and reads the new mark. Counts every allocator (torch, Rust, C++), unlike
    Python's tracemalloc. Timing is never measured inside it (see
    ``_measuring_allocations``).
    """
    _measuring_allocations(True)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _status_kib("VmRSS")
        fn()
        return (_status_kib("VmHWM") - base) / 1024
    finally:
        _measuring_allocations(False)


def hf_greedy_runner(hf, prompt: list[int], new_tokens: int) -> Callable[[], list[int]]:
    """A call of transformers' ``generate()`` on ``hf``: greedy, batch 1, returning the new token ids."""
    import torch

    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)

    def run():
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False)
        return out[0, len(prompt) :].tolist()

    return run


def prepared_stories(root):
    """Built-in stories (3,000 under ALILAMA_BENCH_FULL, else 300), a BPE tokenizer and prepared data in ``root``.

    The tokenizer asks for 4,096 ids (400 in a quick run); fewer stories allow fewer merges, and the
    vocabulary follows without a warning. Returns the prepared data folder.
    """
    import warnings

    from alilama_core.app.prepare import iter_documents, prepare
    from alilama_core.runs.stories import write_corpus
    from alilama_core.base.errors import AlilamaWarning
    from alilama_core.engine.registry import get_tokenizer

    write_corpus(root / "stories.txt", 3000 if FULL else 300, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AlilamaWarning)
        tok = get_tokenizer("bpe").train(
            iter_documents([str(root / "stories.txt")]), 4096 if FULL else 400, special_tokens=["<|endoftext|>"]
        )
    tok.save(root / "tok")
    prepare([str(root / "stories.txt")], root / "tok", root / "data", val_fraction=0.05)
    return root / "data"
