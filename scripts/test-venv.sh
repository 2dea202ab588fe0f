#!/usr/bin/env bash
# The venv of the e2e client tests (the official OpenAI SDK, grpcio): made on first use and
# again whenever tests/e2e/requirements.txt changes; prints the venv's python.
#   scripts/test-venv.sh [venv-dir]   (default: build/venv-e2e)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$src/build/venv-e2e}
req=$src/tests/e2e/requirements.txt
stamp=$venv/.requirements
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$stamp"; then
  echo "test-venv: installing $(grep -v '^#' "$req" | tr '\n' ' ')into $venv" >&2
  # System site packages: python3-jsonschema (scripts/setup.sh) judges answers there too.
  python3 -m venv --system-site-packages "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir -r "$req" >&2
  cp "$req" "$stamp"
fi
echo "$venv/bin/python"
