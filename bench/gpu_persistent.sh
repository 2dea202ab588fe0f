#!/usr/bin/env bash
# On the GPU machine, in one call: the persistent decode step (issue 19) against the
# kernel-per-op step (tests/gpu/persistent_decode_test.cpp, with the decode graph and kernel
# option tests beside it), then decode tok/s of bf16 / int4 / int2 with and without it on the
# Qwen3-4B shape (dq-bench-gpu FORMAT+persistent), each beside its roofline. The tests run first
# and under a timeout (a wrong counter would hang the persistent kernel); the bench only runs
# when they pass. Writes $OUT/tests/* and $OUT/gpu_persistent_decode.{json,md}.
# Needs DQ_BIN with dq_gpu_tests, dq-tool and dq-bench-gpu (or DQ_TEST_BIN / DQ_BENCH_BIN when
# they travel in separate calls: a missing one is skipped); DQ_SMOLLM2 for the SmolLM2 case
# (skipped without it). Two calls of 64 MiB: .gpu/bin = dq_gpu_tests + dq-tool with .gpu/libs
# (DQ_TEST_BIN=.gpu/bin DQ_BENCH_BIN=none), then .gpu-b/bin = dq-bench-gpu with .gpu-b/libs
# (DQ_TEST_BIN=none DQ_BENCH_BIN=.gpu-b/bin), LD_LIBRARY_PATH set to the call's libs.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release-cuda/bin}
test_bin=${DQ_TEST_BIN:-$bin}
bench_bin=${DQ_BENCH_BIN:-$bin}
out=${OUT:-/tmp/dq-persistent}
mkdir -p "$out/tests"
if [ -x "$test_bin/dq_gpu_tests" ]; then
  if [ -x "$test_bin/dq-tool" ]; then
    "$test_bin/dq-tool" make-tiny --out /tmp/tiny-qwen3 --seed 1 --hidden 128 --heads 4 \
      --kv-heads 2 --head-dim 64 --intermediate 256 --layers 2 \
      --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json \
      --chat-template tests/golden/chat/qwen3_template.jinja >/dev/null
    export DQ_TINY_QWEN3=/tmp/tiny-qwen3
  fi
  rc=0
  timeout "${DQ_TEST_TIMEOUT:-300}" "$test_bin/dq_gpu_tests" \
    --gtest_filter="${DQ_TEST_FILTER:-*PersistentDecode*:KernelOptions*:*DecodeGraph*}" \
    --gtest_output="json:$out/tests/persistent_tests.json" >"$out/tests/persistent_tests.log" 2>&1 ||
    rc=$?
  grep -E '^\[(  PASSED|  FAILED|  SKIPPED)|FAILED|^\[persistent|tests ran' \
    "$out/tests/persistent_tests.log" | head -60 || true
  echo "dq_gpu_tests exit code $rc"
  [ "$rc" -eq 0 ] || exit "$rc"
fi
if [ -x "$bench_bin/dq-bench-gpu" ]; then
  formats=${DQ_FORMATS:-"bf16 bf16+persistent int4 int4+persistent int2 int2+persistent"}
  # shellcheck disable=SC2086
  # DQ_PERSISTENT_TRACE=1: per-task times of the +persistent runs, summed per task kind (the
  # figures then include 3 timer stores per task; the runs say "traced").
  timeout "${DQ_BENCH_TIMEOUT:-400}" "$bench_bin/dq-bench-gpu" --decode-formats $formats \
    --prefill-formats --batches ${DQ_BATCHES:-1 4 8} --out "$out/bench.raw.json" \
    ${DQ_PERSISTENT_TRACE:+--persistent-trace} ||
    echo "dq-bench-gpu: some runs failed"
  python3 bench/gpu_report.py "$out/bench.raw.json" \
    --machine "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" \
    --commit "${DQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" \
    --command "bench/gpu_persistent.sh" --json "$out/gpu_persistent_decode.json" \
    --md "$out/gpu_persistent_decode.md"
  cat "$out/gpu_persistent_decode.md"
fi
