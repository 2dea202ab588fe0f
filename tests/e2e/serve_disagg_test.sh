#!/usr/bin/env bash
# Disaggregated serving on SmolLM2 through `dqserve up` (see serve/disagg.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/disagg.py"
