#!/usr/bin/env bash
# Every ending of a request gives its KV lease back, thousands of times (see serve/lease_endings.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/lease_endings.py"
