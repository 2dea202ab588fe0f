#!/usr/bin/env bash
# A tiny Qwen3.5 across PD over tcp == dqserve generate, its state slots freed (serve/qwen3_5.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/qwen3_5.py"
