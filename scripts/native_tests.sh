#!/usr/bin/env bash
# Configure, build and run the C++ unit tests of the tokenizer core (native/native_tests.cpp:
# pre-tokenizer splits, hash maps, special-token matcher, trainer, encoder, file streaming)
# as the optional CMake target native_tests (-DALILAMA_BUILD_TESTS=ON; pip install never
# builds it). Exits non-zero when a check fails. Needs cmake, a C++17 compiler and Python 3
# with the pinned `regex` (for the Unicode tables); not pybind11 or torch.
#
#   bash scripts/native_tests.sh          # build in build/native-tests (NATIVE_TESTS_BUILD_DIR)
set -euo pipefail

cd "$(dirname "$0")/.."
build="${NATIVE_TESTS_BUILD_DIR:-build/native-tests}"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
python="$(command -v "$python")"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ -f "$build/CMakeCache.txt" ]]; then generator=(); fi  # keep the generator it was made with

# Only the test target is built, so pybind11 is not needed: a stub pybind11 config keeps the
# project's find_package(pybind11) satisfied when pybind11 is not installed.
pybind11_dir="$("$python" -m pybind11 --cmakedir 2>/dev/null || true)"
if [[ -z "$pybind11_dir" ]]; then
  pybind11_dir="$build/pybind11-stub"
  mkdir -p "$pybind11_dir"
  printf 'function(pybind11_add_module name)\n  add_library(${name} MODULE EXCLUDE_FROM_ALL ${ARGN})\nendfunction()\n' \
    > "$pybind11_dir/pybind11Config.cmake"
  pybind11_dir="$(cd "$pybind11_dir" && pwd)"
fi

cmake -S . -B "$build" "${generator[@]}" -DALILAMA_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$python" -Dpybind11_DIR="$pybind11_dir" >/dev/null
cmake --build "$build" --target native_tests -j "$(nproc 2>/dev/null || echo 2)"
(cd "$build" && ctest --output-on-failure)
