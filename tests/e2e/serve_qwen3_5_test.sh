#!/usr/bin/env bash
# A tiny Qwen3.5: dqserve generate == transformers; the PD workers refuse it (see serve/qwen3_5.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/qwen3_5.py"
