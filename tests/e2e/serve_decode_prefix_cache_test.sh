#!/usr/bin/env bash
# Prefix caching on the decode worker, real processes on the tiny Qwen3 (see
# serve/decode_prefix_cache.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/decode_prefix_cache.py"
