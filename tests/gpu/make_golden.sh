#!/usr/bin/env bash
# On the GPU machine: write the HF transformers golden outputs into $OUT (or tests/golden/model).
# Needs: build/release-cuda/bin (dq-tool), the gguf wheel in .whl/, the default model at
# $SMOLLM2 (defaults to models/SmolLM2-135M-Instruct.Q4_1.gguf).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-tests/golden/model}
smol=${SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
bin=${DQ_BIN:-build/release-cuda/bin}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
"$bin/dq-tool" make-tiny --out /tmp/tiny-qwen3 --seed 1 \
  --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json \
  --chat-template tests/golden/chat/qwen3_template.jinja
PYTHONUNBUFFERED=1 python3 tests/golden/model/make_model_golden.py --smollm2 "$smol" \
  --tiny-qwen3 /tmp/tiny-qwen3 --out "$out"
