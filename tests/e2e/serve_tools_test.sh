#!/usr/bin/env bash
# Tool calls through real processes on the tiny Qwen3 (hermes format from its chat template).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/tools.py"
