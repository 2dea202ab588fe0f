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
# The CUDA backend must compile wherever the toolkit is (CI has nvcc but no GPU); its tests run
# on the GPU machine (tests/gpu/run.sh).
if [ -x /usr/local/cuda/bin/nvcc ] && [ "${DQ_SKIP_CUDA_BUILD:-0}" != 1 ]; then
  echo "test: compiling the CUDA backend (release-cuda preset)"
  cmake --preset release-cuda >/dev/null
  cmake --build --preset release-cuda --target dq_engine_cuda dq_gpu_tests dq-bench-gpu dqserve \
    dq-prefill dq-decode dq-bench-odp dq-bench-kv dq_nccl_gpu_tests dq_ucx_gpu_tests dq_kv_receiver
fi
if [ "${DQ_SANITIZERS:-0}" = "1" ]; then
  echo "test: unit tests under ASan + UBSan (dev preset)"
  cmake --preset dev >/dev/null
  cmake --build --preset dev
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --preset dev -j "$(nproc)" -E 'ModelGolden|^e2e\.' "$@"
fi
