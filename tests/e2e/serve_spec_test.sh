#!/usr/bin/env bash
# Speculative decoding through `dqserve up` (n-gram drafter) on SmolLM2 (see serve/spec.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/spec.py"
