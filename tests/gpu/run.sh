#!/usr/bin/env bash
# On the GPU machine: every CUDA op against the CPU reference on fresh random data, then the
# whole model (SmolLM2 Q4_1 and a tiny random Qwen3) against the CPU backend's logits.
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
grep -E '^\[(  PASSED|  FAILED|  SKIPPED)|FAILED|^\[(tiny_qwen3|smollm2)\]|tests ran' \
  "$out/gpu_tests.log" | head -60
echo "dq_gpu_tests exit code $rc (log: $out/gpu_tests.log)"
exit $rc
