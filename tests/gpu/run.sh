#!/usr/bin/env bash
# On the GPU machine: every CUDA op against the CPU reference on fresh random data, then the
# whole model (SmolLM2 Q4_1 and a tiny random Qwen3) against the CPU backend's logits, in
# weight-only compute and in the prefill compute modes (fp8 W8A8, nvfp4 W4A4, fp8 prefill with
# int4 decode), and decode steps replayed from CUDA graphs against eager ones (bitwise), the
# taps a drafter reads (ForwardHooks::tap_layers) and DFlash on a CUDA target; with two GPUs also
# the nccl and ucx KV transports between them. (Serving with DFlash on the GPU:
# tests/gpu/serve_dflash_cuda.py.)
# Needs build/release-cuda/bin (dq_gpu_tests, dq-tool) and models/SmolLM2-135M-Instruct.Q4_1.gguf
# (or $SMOLLM2). Results (gtest JSON + log) go to $OUT (default /tmp/dq-gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
# head_dim 64: the attention kernels' smallest (the CPU tests' tiny model uses 32).
"$bin/dq-tool" make-tiny --out /tmp/tiny-qwen3 --seed 1 --hidden 128 --heads 4 --kv-heads 2 \
  --head-dim 64 --intermediate 256 --layers 2 \
  --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json \
  --chat-template tests/golden/chat/qwen3_template.jinja >/dev/null
export DQ_TINY_QWEN3=/tmp/tiny-qwen3
export DQ_SMOLLM2=${SMOLLM2:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
rc=0
"$bin/dq_gpu_tests" --gtest_output="json:$out/gpu_tests.json" "$@" >"$out/gpu_tests.log" 2>&1 || rc=$?
grep -E '^\[(  PASSED|  FAILED|  SKIPPED)|FAILED|^\[(tiny_qwen3|smollm2)[a-z0-9_ ]*\]|^\[capture\]|tests ran' \
  "$out/gpu_tests.log" | head -150 || true  # head may close the pipe early (pipefail)
echo "dq_gpu_tests exit code $rc (log: $out/gpu_tests.log)"
# With two GPUs: the KV transports between them, each its own binary (it starts dq_kv_receiver on
# cuda:1): nccl, and ucx on device memory with the UCX of .gpu/ucx-cu13/env.sh
# (bench/pack_ucx_libs.sh; without it the ucx tests fail saying the loaded UCX has no CUDA).
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for kind in nccl ucx; do
    test_bin="$bin/dq_${kind}_gpu_tests"
    if [ ! -x "$test_bin" ]; then
      echo "$test_bin missing (build it with the release-cuda preset)"
      rc=1
      continue
    fi
    krc=0
    (
      if [ "$kind" = ucx ] && [ -f "${UCX_ENV:-.gpu/ucx-cu13/env.sh}" ]; then
        # shellcheck disable=SC1090
        source "${UCX_ENV:-.gpu/ucx-cu13/env.sh}"
      fi
      timeout 600 "$test_bin" --gtest_output="json:$out/${kind}_gpu_tests.json"
    ) >"$out/${kind}_gpu_tests.log" 2>&1 || krc=$?
    grep -E '^\[(  PASSED|  FAILED|  SKIPPED)|^\[ info \]|UCX 1\.|tests ran' \
      "$out/${kind}_gpu_tests.log" | head -30 || true
    echo "dq_${kind}_gpu_tests exit code $krc (log: $out/${kind}_gpu_tests.log)"
    [ "$krc" -eq 0 ] || rc=$krc
  done
fi
exit $rc
