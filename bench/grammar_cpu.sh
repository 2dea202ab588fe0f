#!/usr/bin/env bash
# Structured output's CPU cost on the qwen-style 49k vocabulary: schema compile, mask
# precompute, and per decode step the mask fill and Sample() with and without the grammar.
# Writes bench/results/grammar_mask_cpu.json. Build first:
#   cmake --build build/release --target dq-bench-grammar
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release/bin}
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
commit=$(git rev-parse --short HEAD)
"$bin/dq-bench-grammar" --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json --eos 2 \
  --docs "${DOCS:-20}" --max-steps "${STEPS:-200}" --machine "$machine" --commit "$commit" "$@" \
  > bench/results/grammar_mask_cpu.json
echo "wrote bench/results/grammar_mask_cpu.json"
