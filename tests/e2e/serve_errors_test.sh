#!/usr/bin/env bash
# Bad input against a live deployment (see serve/errors.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/errors.py"
