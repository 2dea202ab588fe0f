#!/usr/bin/env bash
# A tiny Gemma 3 served across PD on the CPU (see serve/gemma3.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/gemma3.py"
