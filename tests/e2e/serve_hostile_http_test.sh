#!/usr/bin/env bash
# Hostile HTTP clients against a live deployment (see serve/hostile_http.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/hostile_http.py"
