"""The two tiers of the test suite: the fast tier (``make test``) and the full tier (``make test-all``, CI).

A test belongs to the slow tier for what it does, found in its code before it runs: the names its
function, its fixtures and the test-tree helpers they call use (followed through functions and classes
defined under tests/ and benchmarks/). Each cause is a marker of its own, added with ``slow``:

    process       starts a process (``subprocess``, ``run_cli``, ``multiprocessing``)
    server        starts ``alilama serve`` or another server process
    training      trains a model in a process of its own (killed and resumed, torchrun)
    other_python  runs another Python environment (the readers, lm-eval, llama.cpp), without Alilama
    ray           starts a Ray cluster
    compile       builds a compiled decode step (AOTInductor, a C++ toolchain), or runs the ``flex`` attention
                  backend, which torch.compile builds anew for each shape at first use in a process

``pytest -m "not slow"`` or ``--tier fast`` runs the rest. A test that starts a process but is fast may say
so with ``@pytest.mark.fast``; one that is slow for a reason its names do not show says ``@pytest.mark.slow``.

The guard keeps the fast tier honest: a fast-tier test whose call takes more than ``ALILAMA_FAST_LIMIT``
seconds (default 8), or whose setup takes more than ``SETUP_FACTOR`` times that (a module's shared fixture is
paid once, by its first test), fails with its name and time under ``--tier fast``; in a full run, where the
slow tier shares the cores, it is reported and counted at the end instead. Fast-tier tests that started a
process are counted too.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_TREES = (ROOT / "tests", ROOT / "benchmarks")

# A name in a test's code (or in what it calls in the test tree) and the cause it makes the test slow for.
CAUSES: dict[str, str] = {
    "subprocess": "process",
    "Popen": "process",
    "multiprocessing": "process",
    "ProcessPoolExecutor": "process",
    "run_cli": "process",
    "ForkServer": "process",
    "Served": "server",
    "CliServer": "server",
    "uvicorn": "server",
    "killed_and_resumed": "training",
    "run_ddp": "training",
    "NO_ALILAMA": "other_python",
    "readers_python": "other_python",
    "ray": "ray",
    "compiled_step": "compile",
    "build_step": "compile",
    "aoti_compile_and_package": "compile",
}
PARAMETERS: dict[str, str] = {"flex": "compile"}
"""A parameter value (a parametrized test's id part) and the cause it makes the test slow for."""
KINDS = sorted(set(CAUSES.values()))
DEFAULT_LIMIT = 8.0
SETUP_FACTOR = 4


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=("fast", "full"),
        default="full",
        help="fast: only the fast tier, each test held to ALILAMA_FAST_LIMIT seconds; full (default): everything",
    )
    parser.addoption("--tier-why", action="store_true", help="print each slow-tier test's causes and where they are")


def pytest_configure(config: pytest.Config) -> None:
    for kind in KINDS:
        config.addinivalue_line("markers", f"{kind}: slow tier, set automatically (tests/alilama_tiers.py)")
    config.addinivalue_line("markers", "fast: in the fast tier although its code starts a process")
    config._tier_over = []  # (nodeid, seconds) of fast-tier tests over the limit, in a full run
    config._tier_processes = set()  # fast-tier tests that started a process
    _watch_processes()
    _share_the_cores()


def _share_the_cores() -> None:
    """An xdist worker computes on its share of the cores. Two workers with torch's default of one intra-op
    thread per core each would spin against each other on two cores: a test of small matmuls then runs 10-20x
    slower than alone (0.3 s alone, 3.5-6.9 s beside another worker)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if os.environ.get("PYTEST_XDIST_WORKER") and workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def _limit() -> float:
    return float(os.environ.get("ALILAMA_FAST_LIMIT", DEFAULT_LIMIT))


# -- finding the causes in the code -----------------------------------------------------------------------


def _in_test_tree(obj) -> bool:
    try:
        source = inspect.getsourcefile(obj)
    except TypeError:
        return False
    return source is not None and any(Path(source).resolve().is_relative_to(tree) for tree in TEST_TREES)


def _names_in(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object uses, with those of the functions defined inside it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_in(const)
    return names


def _names(obj, seen: set) -> dict[str, str]:
    """The names ``obj`` (a function or a class) uses, following what it calls that the test tree defines:
    each name and the qualified name of the function that uses it."""
    obj = inspect.unwrap(obj)
    if id(obj) in seen:
        return {}
    seen.add(id(obj))
    found: dict[str, str] = {}
    if isinstance(obj, type):
        for member in vars(obj).values():
            member = getattr(member, "__func__", member)
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member):
                found = {**_names(member, seen), **found}
        return found
    code = getattr(obj, "__code__", None)
    if code is None:
        return {}
    found = dict.fromkeys(_names_in(code), f"{obj.__module__}.{obj.__qualname__}")
    scope = getattr(obj, "__globals__", {})
    for name in list(found):
        target = scope.get(name)
        if (inspect.isfunction(target) or isinstance(target, type)) and _in_test_tree(target):
            found = {**_names(target, seen), **found}
    return found


def causes_of(item: pytest.Item) -> dict[str, str]:
    """Why ``item`` is slow, from its code and its fixtures' code: each cause and where it was found
    (``subprocess in test_x.helper``); empty for a fast test."""
    seen: set = set()
    names = _names(getattr(item, "function", None) or (lambda: None), seen)
    fixtureinfo = getattr(item, "_fixtureinfo", None)
    for defs in fixtureinfo.name2fixturedefs.values() if fixtureinfo else ():
        for fixturedef in defs:
            if _in_test_tree(fixturedef.func):
                names = {**_names(fixturedef.func, seen), **names}
    causes: dict[str, str] = {}
    for name, where in sorted(names.items()):
        if name in CAUSES:
            causes.setdefault(CAUSES[name], f"{name} in {where}")
    callspec = getattr(item, "callspec", None)
    for value in callspec.params.values() if callspec else ():
        if isinstance(value, str) and value in PARAMETERS:
            causes.setdefault(PARAMETERS[value], f"the parameter {value!r}")
    return causes


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fast, deselected = [], []
    for item in items:
        if item.get_closest_marker("fast") is None:
            causes = causes_of(item)
            for cause in sorted(causes):
                item.add_marker(cause)
            if causes and config.getoption("--tier-why"):
                print(f"{item.nodeid}: " + "; ".join(f"{c} ({w})" for c, w in sorted(causes.items())))
            if any(item.get_closest_marker(kind) for kind in KINDS):
                item.add_marker("slow")
        slow = item.get_closest_marker("slow") is not None
        (deselected if slow and config.getoption("--tier") == "fast" else fast).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = fast


# -- the guard ---------------------------------------------------------------------------------------------

_current: dict = {"item": None, "processes": 0}


def _watch_processes() -> None:
    """Count the processes each test starts (every ``subprocess`` call goes through ``Popen.__init__``)."""
    if getattr(subprocess.Popen.__init__, "_alilama_counted", False):
        return
    original = subprocess.Popen.__init__

    def counted(self, *args, **kwargs):
        _current["processes"] += 1
        original(self, *args, **kwargs)

    counted._alilama_counted = True
    subprocess.Popen.__init__ = counted


def _is_fast(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    _current.update(item=item, processes=0, seconds=0.0)
    yield
    _current["item"] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup":
        _current["seconds"] = call.duration
    if call.when != "call" or not _is_fast(item):
        return
    setup, seconds = _current["seconds"], call.duration
    report.user_properties.append(("tier_seconds", round(setup + seconds, 3)))
    if _current["processes"]:
        report.user_properties.append(("tier_processes", _current["processes"]))
    if report.passed and (seconds > _limit() or setup > SETUP_FACTOR * _limit()):
        report.user_properties.append(("tier_over", True))
        if item.config.getoption("--tier") == "fast":
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} is in the fast tier but took {seconds:.1f} s (setup {setup:.1f} s; the limits are "
                f"{_limit():g} s a call and {SETUP_FACTOR * _limit():g} s a setup, ALILAMA_FAST_LIMIT): make it "
                f"cheaper, or mark what makes it slow (tests/alilama_tiers.py: {', '.join(KINDS)}, or slow)"
            )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    properties = dict(report.user_properties)
    config = _CONFIG.get("config")
    if config is None:
        return
    if properties.get("tier_over") and config.getoption("--tier") == "full":
        config._tier_over.append((report.nodeid, properties["tier_seconds"]))
    if properties.get("tier_processes"):
        config._tier_processes.add(report.nodeid)


_CONFIG: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    over, started = config._tier_over, config._tier_processes
    if not over and not started:
        return
    terminalreporter.section("test tiers")
    if over:
        terminalreporter.write_line(
            f"{len(over)} fast-tier test(s) went over the limits here (they fail under --tier fast; setup and call):"
        )
        for nodeid, seconds in sorted(over, key=lambda x: -x[1]):
            terminalreporter.write_line(f"  {seconds:7.1f} s  {nodeid}")
    if started:
        terminalreporter.write_line(f"{len(started)} fast-tier test(s) started a process and stayed under the limit")
