#!/usr/bin/env bash
# On the GPU machine: time to first token of offloaded disaggregated prefill (docs/odp.md) on a
# Qwen3-4B-shaped random model: weight-only prefill on resident int2 / int4 decode weights, ODP
# (int2 resident + streamed NVFP4 or FP8 prefill image, from the disk cold and warm, or from
# pinned host memory), resident FP8 for reference, at 128 .. 32K tokens, with device memory per
# configuration and each figure beside its floor. The images (about 2.0 GB NVFP4, 3.6 GB FP8) are
# written by the bench to $ODP_IMAGE_DIR (default: $OUT). Writes $OUT/odp_bench.{json,md}; copy
# them to bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-bench}
images=${ODP_IMAGE_DIR:-$out}
mkdir -p "$out" "$images"
rc=0
"$bin/dq-bench-odp" --out "$out/odp_bench.json" --image-dir "$images" \
  --machine "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nproc) CPUs; images on $(df -h --output=source,fstype "$images" | tail -1 | tr -s ' ')" \
  --commit "${DQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" \
  --command "bench/odp.sh $*" "$@" || rc=$?
cat "$out/odp_bench.md" 2>/dev/null || true
exit $rc
