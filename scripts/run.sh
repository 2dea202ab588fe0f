#!/usr/bin/env bash
# Set-up, then the main job on the default model: `dqserve up` serves SmolLM2-135M-Instruct with
# a router (OpenAI API on http://127.0.0.1:8000), a prefill worker and a decode worker, each a
# process on this machine. Ctrl-C stops all three.
#   scripts/run.sh [dqserve up flags, e.g. --config deploy/local.toml --port 8080]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release >&2
exec build/release/bin/dqserve up "$@"
