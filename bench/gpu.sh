#!/usr/bin/env bash
# On the GPU machine: CUDA decode tok/s per weight format (batch 1, 4, 8) and prefill time at
# 512 / 2K / 8K / 32K tokens (bf16, fp8, nvfp4) on a Qwen3-4B-shaped random model, each beside
# its roofline. Writes $OUT/gpu_bench.json and $OUT/gpu_bench.md; copy them to bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-bench}
mkdir -p "$out"
"$bin/dq-bench-gpu" --out "$out/gpu_bench.raw.json" "$@" || echo "dq-bench-gpu: some runs failed"
python3 bench/gpu_report.py "$out/gpu_bench.raw.json" \
  --machine "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" \
  --commit "${DQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" \
  --command "bench/gpu.sh $*" --json "$out/gpu_bench.json" --md "$out/gpu_bench.md"
cat "$out/gpu_bench.md"
