#!/usr/bin/env bash
# Runs every test that runs without a GPU: set-up first (packages, model, build), then CTest.
# GPU tests live in tests/gpu/ and run on the GPU machine (tests/gpu/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${DQ_PRESET:-release}
scripts/setup.sh "$preset"
scripts/check-format.sh
ctest --preset "$preset" -j "$(nproc)" "$@"
