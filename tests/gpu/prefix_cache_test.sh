#!/usr/bin/env bash
# On the GPU machine: prefix caching with the prefill worker on the GPU.
# - A device KV cache shipped through host staging (tcp) cannot use it yet: dq-prefill
#   --prefix-cache must refuse at start-up, saying so (it used to accept it and cache nothing).
# - With DQ_PREFIX_CACHE_E2E=1 (a transport that reads device memory, when one is set up here):
#   tests/e2e/serve/prefix_cache.py with both workers on the GPU.
# Needs dq-prefill (and for the e2e dq-decode) of a release-cuda build and dq-router in DQ_BIN_DIR
# (default build/release-cuda/bin), and the SmolLM2 GGUF in models/.
set -uo pipefail
cd "$(dirname "$0")/../.."
export DQ_BIN_DIR=${DQ_BIN_DIR:-$PWD/build/release-cuda/bin} DQ_SOURCE_DIR=$PWD
model=${DQ_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
out=$(timeout 120 "$DQ_BIN_DIR/dq-prefill" --model "$model" --device cuda --port 19731 \
  --transports tcp --prefix-cache 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && grep -q "prefix-cache: this worker's KV is in device memory" <<<"$out"; then
  echo "ok: dq-prefill --device cuda --transports tcp --prefix-cache refused (exit $rc)"
else
  echo "FAIL: dq-prefill --prefix-cache with host-staged device KV: exit $rc: ${out: -400}"
  exit 1
fi
if [ "${DQ_PREFIX_CACHE_E2E:-0}" = 1 ]; then
  export DQ_WORKER_DEVICE_ARGS="--device cuda"
  exec python3 tests/e2e/serve/prefix_cache.py
fi
echo "all passed"
