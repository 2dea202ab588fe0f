#!/usr/bin/env bash
# Runs every test that runs without a GPU: set-up first (packages, model, build), then CTest on
# the optimized build, then the unit tests again under address + undefined-behaviour sanitizers
# (the `dev` preset; the whole-model goldens and end-to-end scripts run only in the first pass,
# since they are slow in a debug build). GPU tests live in tests/gpu/ (tests/gpu/run.sh).
#   DQ_SKIP_SANITIZERS=1 scripts/test.sh     skips the second pass
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
scripts/check-format.sh
ctest --preset release -j "$(nproc)" "$@"
if [ "${DQ_SKIP_SANITIZERS:-0}" != "1" ]; then
  echo "test: unit tests under ASan + UBSan (dev preset)"
  cmake --preset dev >/dev/null
  cmake --build --preset dev
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --preset dev -j "$(nproc)" -E 'ModelGolden|^e2e\.' "$@"
fi
