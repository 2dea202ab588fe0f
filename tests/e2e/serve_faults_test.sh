#!/usr/bin/env bash
# Worker and client failures against real processes (see serve/faults.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/faults.py"
