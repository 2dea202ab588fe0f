#!/usr/bin/env bash
# Runs every test that runs without a GPU: set-up first (packages, model, build), then CTest on
# the optimized build. GPU tests live in tests/gpu/.
#   DQ_SANITIZERS=1 scripts/test.sh   also runs the unit tests under address + undefined-behaviour
#                                     sanitizers (the `dev` preset; goldens and end-to-end scripts
#                                     only run in the optimized pass, they are slow in debug)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
scripts/check-format.sh
ctest --preset release -j "$(nproc)" "$@"
if [ "${DQ_SANITIZERS:-0}" = "1" ]; then
  echo "test: unit tests under ASan + UBSan (dev preset)"
  cmake --preset dev >/dev/null
  cmake --build --preset dev
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --preset dev -j "$(nproc)" -E 'ModelGolden|^e2e\.' "$@"
fi
