#!/usr/bin/env bash
# On a machine with nvcc and a GPU, or with a probe built elsewhere (DQ_PROBE=path): how fast
# CTAs stream weights by loading scheme, warps per CTA and bytes in flight
# (bench/gpu_stream_probe.cu). Writes $OUT/gpu_stream_probe.json (default /tmp/dq-probe).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/dq-probe}
mkdir -p "$out"
probe=${DQ_PROBE:-}
if [ -z "$probe" ]; then
  probe=$out/gpu_stream_probe
  nvcc -O3 -std=c++17 -arch=sm_90a -o "$probe" bench/gpu_stream_probe.cu
fi
"$probe" >"$out/gpu_stream_probe.json"
echo "wrote $out/gpu_stream_probe.json"
