#!/usr/bin/env bash
# Set-up, then the main job on the default model: an interactive chat with dqserve generate.
#   scripts/run.sh [extra dqserve generate flags]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release >&2
exec build/release/bin/dqserve generate --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --interactive "$@"
