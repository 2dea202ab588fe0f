#!/usr/bin/env bash
# dqserve up restarts a process that died (see serve/supervise.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/supervise.py"
