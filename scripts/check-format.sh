#!/usr/bin/env bash
# Fails if any C++ source differs from clang-format's output (Google style, 100 columns).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format not found; install it (apt-get install clang-format)" >&2
  exit 1
fi
bad=$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs -r clang-format --dry-run 2>&1 | grep -c warning || true)
if [ "$bad" != "0" ]; then
  git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs -r clang-format --dry-run 2>&1 | grep warning | head -20
  echo "check-format: run clang-format -i on the files above" >&2
  exit 1
fi
