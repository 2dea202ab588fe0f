#!/usr/bin/env bash
# Pure-Python unit tests of dq-eval (tests/unit/eval/*_test.py): scoring, item generation,
# statistics, the runner against a mock OpenAI-compatible server, the PNG writer.
set -euo pipefail
SRC=${DQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$SRC/tests/unit/eval"
exec python3 -W error::ResourceWarning -m unittest discover -s . -p '*_test.py' -v
