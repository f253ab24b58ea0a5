"""How many CPU threads torch uses: the ``--threads`` / ``train.threads`` setting and its default.

The default is the number of physical cores this process may run on: the CPUs
of its affinity mask (``os.sched_getaffinity``: a container's or ``taskset``'s
limit), counted once per core when the machine shares cores between hyper-threads.
PyTorch's own default counts every logical CPU of the machine, which on a busy
or shared machine makes each small op wait for threads that are not free.
"""

from __future__ import annotations

import os
from pathlib import Path

from alilama_core.base.errors import ConfigError


def usable_cpus() -> set[int]:
    """The logical CPUs this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def physical_cores(cpus: set[int]) -> int:
    """How many distinct physical cores ``cpus`` span (each logical CPU when the topology is unknown)."""
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return len(cpus)
        cores.add((package, core))
    return len(cores) or len(cpus)


def default_threads() -> int:
    """Physical cores of the CPUs this process may use (at least 1)."""
    return max(1, physical_cores(usable_cpus()))


def free_cores(sample_s: float = 0.5) -> int:
    """Physical cores of this process's CPUs that other work leaves free now (at least 1).

    Measured over ``sample_s`` seconds (``psutil``'s per-CPU busy share): a
    core that another process keeps busy is taken away, so that no training
    thread waits for it. What a newcomer's first run uses when no thread count
    is given (``alilama quickstart``); training itself defaults to every core.
    """
    import psutil

    cpus = usable_cpus()
    shares = psutil.cpu_percent(interval=sample_s, percpu=True)
    busy = sum(shares[c] for c in cpus if c < len(shares)) / 100.0  # logical CPUs' worth of other work
    cores = default_threads()
    per_core = len(cpus) / cores  # hyper-threads per core
    return max(1, min(cores, round(cores - busy / per_core)))


def choose_threads(requested: int | None) -> int:
    """``requested`` when given (a positive integer), else ``default_threads()``."""
    if requested is None:
        return default_threads()
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ConfigError(f"threads must be a positive integer (or unset for the default), got {requested!r}")
    return requested


def apply_threads(requested: int | None) -> int:
    """Set torch's intra-op threads to ``choose_threads(requested)``; returns the number set."""
    import torch

    n = choose_threads(requested)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
