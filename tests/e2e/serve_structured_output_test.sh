#!/usr/bin/env bash
# Structured output (response_format json_schema / json_object), logit_bias and min_tokens
# through real processes on the tiny Qwen3, judged by Python's json and jsonschema.
set -euo pipefail
exec python3 "$(dirname "$0")/serve/structured_output.py"
