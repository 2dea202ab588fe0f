#!/usr/bin/env bash
# Pure-Python unit tests of dq-bench serve (tests/e2e/bench/*_test.py): length distributions,
# prompts, percentiles, the summary, the SSE parser, the report, and the client and command
# line against a mock streaming server. The real deployment is bench_serve_test.sh.
set -euo pipefail
SRC=${DQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$SRC/tests/e2e/bench"
exec python3 -W error::ResourceWarning -m unittest discover -s . -p '*_test.py' -v
