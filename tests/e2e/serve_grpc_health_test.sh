#!/usr/bin/env bash
# grpc.health.v1 and server reflection on the router and both workers (see
# serve/grpc_services.py); grpcio and its health/reflection packages come from PyPI into the venv
# that scripts/test-venv.sh makes.
set -euo pipefail
src=${DQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
py=$("$src/scripts/test-venv.sh" "${DQ_BIN_DIR:-$src/build/release/bin}/../venv-e2e")
exec "$py" "$(dirname "$0")/serve/grpc_services.py"
