#!/usr/bin/env bash
# The DFlash drafter's forward (engine/spec/dflash_drafter.cpp) against a PyTorch reference
# written from the published description (tests/gpu/dflash_reference.py): random-weight DFlash
# checkpoints in the published layout for a tiny random Qwen3 target, the target's hidden states
# and our drafter's logits for two blocks dumped by `dq-tool dflash-dump`, recomputed in torch
# (on the GPU when torch sees one, else on the CPU). Two shapes: 1 draft layer, block 8, target
# layers 0 and 1 (the last: read after the final norm); 2 draft layers with 4:1 GQA, block 16,
# target layer 0 only.
# Needs $DQ_BIN/dq-tool (default build/release-cuda/bin) and python3 with torch.
# Prints max |diff| and top-1 agreement per block; exits nonzero on a mismatch.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
py=${PYTHON:-python3}
work=$(mktemp -d /tmp/dq-dflash-ref.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin/dq-tool" make-tiny --out "$work/target" --seed 3 --hidden 128 --heads 4 --kv-heads 2 \
  --head-dim 32 --intermediate 256 --layers 2 \
  --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json \
  --chat-template tests/golden/chat/qwen3_template.jinja >/dev/null
ids='[9, 412, 77, 1033, 5, 260, 871, 42, 300, 18, 999, 64, 7, 128, 55, 610, 33, 2]'
rc=0
run() {  # name, make-dflash flags...
  local name=$1
  shift
  "$bin/dq-tool" make-dflash --target "$work/target" --out "$work/$name" "$@" >/dev/null
  "$bin/dq-tool" dflash-dump --target "$work/target" --draft "$work/$name" --ids "$ids" \
    --split 7 --out "$work/$name.safetensors" >/dev/null
  echo "== $name ($*)"
  "$py" tests/gpu/dflash_reference.py --target "$work/target" --draft "$work/$name" \
    --dump "$work/$name.safetensors" || rc=1
}
run one_layer --layers 1 --block-size 8 --target-layers 0,1 --seed 11
run gqa_block16 --layers 2 --block-size 16 --heads 8 --kv-heads 2 --head-dim 16 \
  --intermediate 192 --target-layers 0 --seed 12
echo "dflash reference test: $([ $rc -eq 0 ] && echo passed || echo FAILED)"
exit $rc
