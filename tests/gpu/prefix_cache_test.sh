#!/usr/bin/env bash
# On the GPU machine: tests/e2e/serve/prefix_cache.py with both workers on the GPU (--device
# cuda): the prefix-cached prefill worker's answers against a cache-off deployment, free blocks,
# a second turn, eviction. Needs dq-prefill and dq-decode of a release-cuda build and dq-router in
# DQ_BIN_DIR (default build/release-cuda/bin), and the SmolLM2 GGUF in models/.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DQ_BIN_DIR=${DQ_BIN_DIR:-$PWD/build/release-cuda/bin} DQ_SOURCE_DIR=$PWD
export DQ_WORKER_DEVICE_ARGS="--device cuda"
exec python3 tests/e2e/serve/prefix_cache.py
