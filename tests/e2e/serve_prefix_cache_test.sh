#!/usr/bin/env bash
# Prefix caching on the prefill worker, real processes on SmolLM2 (see serve/prefix_cache.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/prefix_cache.py"
