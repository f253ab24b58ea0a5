"""The tokenizer binding built without its CPython-internals fast paths gives the same results.

``native/binding.cpp`` reads str in place and fills ``encode_batch``'s lists from worker
threads without the GIL when ``ALILAMA_CPYTHON_FASTPATH`` is on (the installed module);
with it off it uses only the public C API. This builds the fallback into a temporary
directory (CMake, ``-DALILAMA_CPYTHON_FASTPATH=OFF``, about 30 s on two cores, once per
session), runs ``binding_probe.py`` against each build in its own process (two pybind11
modules registering the same C++ classes cannot share an interpreter) and compares every
result: ids, merges, decoded bytes, progress reports, and the type and message of each
error.

Building needs a C++ compiler, cmake and pybind11 in this environment; without one of
them the tests skip, saying which, unless ``ALILAMA_REQUIRE_NATIVE_FALLBACK=1`` (CI),
which makes that a failure.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("binding_probe.py")


def _cannot_build(reason: str) -> None:
    if os.environ.get("ALILAMA_REQUIRE_NATIVE_FALLBACK", "") not in ("", "0"):
        pytest.fail(f"{reason} (ALILAMA_REQUIRE_NATIVE_FALLBACK is set)")
    pytest.skip(reason)


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="session")
def installed_native() -> Path:
    try:
        from alilama_bpe import _native
    except ImportError as e:
        pytest.skip(f"the native tokenizer is not built (make install): {e}")
    if not hasattr(_native, "cpython_fastpath"):
        pytest.fail(
            "the installed alilama_bpe._native predates ALILAMA_CPYTHON_FASTPATH: rebuild it (pip install -e .)"
        )
    return Path(_native.__file__)


@pytest.fixture(scope="session")
def fallback_native(tmp_path_factory) -> Path:
    """``_native`` built with ``-DALILAMA_CPYTHON_FASTPATH=OFF`` into a temporary build directory."""
    cxx = _compiler()
    if cxx is None:
        _cannot_build("no C++ compiler found (set CXX): cannot build the fallback variant of the binding")
    try:
        import pybind11
    except ImportError:
        _cannot_build("pybind11 is not installed in this environment (pip install pybind11): cannot build the fallback")
    cmake = shutil.which("cmake")
    if cmake is None:
        _cannot_build("cmake not found: cannot build the fallback variant of the binding")
    build = tmp_path_factory.mktemp("native-fallback")
    configure = [
        cmake, "-S", str(REPO), "-B", str(build),
        f"-DCMAKE_CXX_COMPILER={cxx}",
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DALILAMA_CPYTHON_FASTPATH=OFF",
    ]  # fmt: skip
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    jobs = str(min(2, os.cpu_count() or 1))
    for cmd in (configure, [cmake, "--build", str(build), "--target", "_native", "-j", jobs]):
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}")
    so = build / f"_native{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert so.is_file(), f"the build made no {so.name}"
    return so


def _probe(so: Path, out: Path) -> dict:
    run = subprocess.run([sys.executable, str(PROBE), str(so), str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"the probe failed on {so}:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    with open(out, "rb") as f:
        return pickle.load(f)


@pytest.fixture(scope="session")
def results(installed_native, fallback_native, tmp_path_factory) -> tuple[dict, dict]:
    d = tmp_path_factory.mktemp("probe")
    return _probe(installed_native, d / "fast.pickle"), _probe(fallback_native, d / "fallback.pickle")


def test_the_two_builds_are_the_two_variants(results):
    fast, fallback = results
    assert fast["fastpath"] is True
    assert fallback["fastpath"] is False


def test_both_variants_give_identical_results(results):
    fast, fallback = results
    fast, fallback = dict(fast), dict(fallback)
    del fast["fastpath"], fallback["fastpath"]
    assert fast.keys() == fallback.keys()
    differing = [k for k in fast if fast[k] != fallback[k]]
    assert not differing, "the variants differ in " + ", ".join(
        f"{k}: fast {str(fast[k])[:300]} / fallback {str(fallback[k])[:300]}" for k in differing
    )


@pytest.mark.parametrize("which", [0, 1], ids=["fastpath", "fallback"])
def test_each_variant_is_sound(results, which):
    """Not only equal: each round-trips, counts references exactly and reports errors as Python exceptions."""
    r = results[which]
    assert r["roundtrip"]
    assert r["merges_again_equal"]
    assert r["batch_repeat_equal"]
    assert r["refcount_delta"] == 0
    assert len(r["merges"]) == 400
    assert r["batch_disallowed"] == ("error", "DisallowedSpecialError", "<|fim_prefix|>")
    assert r["batch_surrogate"][:2] == ("error", "UnicodeEncodeError")
    assert r["batch_nonstr"][:2] == ("error", "TypeError")
    assert r["train_progress_raises"] == ("error", "KeyError", "'stop at 0/50'")
    assert r["add_file_progress_raises"][:2] == ("error", "KeyError")
    assert r["encode_file_progress_raises"][:2] == ("error", "KeyError")
    assert r["add_file_invalid"][:2] == ("error", "NativeTokenizerError")
    assert r["batch_empty"] == [] and r["batch_empty_strs"] == [[]] * 700
    assert all(isinstance(ids, list) for ids in r["batch_allowed_2"])
