#!/usr/bin/env bash
# The self drafter disaggregated on SmolLM2 (see serve/spec_self.py).
set -euo pipefail
exec python3 "$(dirname "$0")/serve/spec_self.py" smol
