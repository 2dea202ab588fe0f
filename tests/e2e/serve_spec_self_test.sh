#!/usr/bin/env bash
# The self drafter disaggregated (prompt KV shipped by the prefill worker, or recomputed by the
# decode worker) on the tiny random Qwen3, through `dqserve up` (see serve/spec_self.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/spec_self.py" tiny
