#!/usr/bin/env bash
# Soak of a whole deployment: dqserve up under 16 streaming clients for 10 minutes with a worker
# killed every 2 minutes (see bench/soak.py). Writes bench/results/soak_<name>.json.
#   bench/soak.sh [--minutes 10] [--kill-every 120] [--clients 16] [--model PATH] [--name cpu]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
exec python3 bench/soak.py "$@"
