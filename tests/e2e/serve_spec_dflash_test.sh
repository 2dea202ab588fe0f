#!/usr/bin/env bash
# The DFlash drafter in the serving path, colocated and across the prefill/decode split (context
# shipped by the prefill worker, or recomputed by the decode worker) on the tiny random Qwen3,
# through `dqserve up` and workers started directly (see serve/spec_dflash.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/spec_dflash.py"
