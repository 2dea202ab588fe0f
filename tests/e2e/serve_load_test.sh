#!/usr/bin/env bash
# 16 streaming clients for 60 s against a batch of 4 (see serve/load.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/load.py"
