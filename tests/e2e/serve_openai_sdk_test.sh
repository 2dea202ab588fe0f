#!/usr/bin/env bash
# The official OpenAI Python SDK against `dqserve up` (tests/e2e/serve/openai_sdk.py); the SDK
# comes from PyPI into a venv made by scripts/test-venv.sh.
set -euo pipefail
src=${DQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
py=$("$src/scripts/test-venv.sh" "${DQ_BIN_DIR:-$src/build/release/bin}/../venv-e2e")
exec "$py" "$(dirname "$0")/serve/openai_sdk.py"
