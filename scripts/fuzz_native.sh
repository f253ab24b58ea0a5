#!/usr/bin/env bash
# Build the native code with AddressSanitizer + UndefinedBehaviorSanitizer and run bounded
# randomised checks: the tokenizer over arbitrary input (native/fuzz_main.cpp), then the
# attention-mask gradient over random shapes against a double-precision reference
# (native/bias_grad_check.cpp, 10 s).
#
#   bash scripts/fuzz_native.sh [SECONDS]      # default 35 s of tokenizer fuzzing (plus ~10-15 s to build)
#
# Needs only g++ (or $CXX) and Python 3 (for the Unicode tables). FUZZ_SEED fixes the seed.
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${1:-${FUZZ_SECONDS:-35}}"
seed="${FUZZ_SEED:-$(date +%s)}"
build="${FUZZ_BUILD_DIR:-build/fuzz}"
cxx="${CXX:-g++}"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi

mkdir -p "$build"
"$python" native/gen_unicode_tables.py "$build/unicode_tables.h"
echo "building $build/fuzz_native with $cxx -fsanitize=address,undefined"
"$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=address,undefined -fno-sanitize-recover=all \
  -I"$build" -Inative native/bpe.cpp native/fuzz_main.cpp -o "$build/fuzz_native" -pthread

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
"$build/fuzz_native" --seconds "$seconds" --seed "$seed"

echo "building $build/bias_grad_check with $cxx -fsanitize=address,undefined"
"$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=address,undefined -fno-sanitize-recover=all \
  -Inative native/bias_grad_check.cpp -o "$build/bias_grad_check" -pthread
"$build/bias_grad_check" --seconds "${BIAS_GRAD_SECONDS:-10}" --seed "$seed"
