#!/usr/bin/env bash
# One of two decode workers killed under load while the other keeps serving: the GPU test
# (tests/gpu/serve_faults_gpu.py) run on the CPU over tcp, so CI guards the router's handling
# (a failed KV transfer must not take the prefill worker down with the dead decode worker).
set -euo pipefail
export DQ_MODEL=$DQ_SOURCE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf DQ_TRANSPORT=tcp
export DQ_PREFILL_DEVICE=cpu DQ_DECODE_DEVICE=cpu DQ_USERS=3 DQ_PROMPT_REPEAT=10 DQ_MAX_TOKENS=200
exec python3 "$(dirname "$0")/../gpu/serve_faults_gpu.py"
