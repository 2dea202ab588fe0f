#!/usr/bin/env bash
# Speculative decoding on SmolLM2-135M-Instruct on one CUDA GPU (issue 8): plain vs n-gram vs
# self-drafters through the Generator, batch 1 and 4, over a bf16 and an int4 (g64) target made
# from the Q4_1 GGUF; every arm's greedy tokens must equal plain decoding's. The CPU twin is
# bench/cpu_spec.sh. Writes $OUT/gpu_spec_smollm2.json (one entry per target) and the logs.
#   SMOLLM2=path/to.gguf DQ_BIN=build/release-cuda/bin bench/gpu_spec.sh
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-gpu-spec}
ckpt=${DQ_CKPT:-/tmp/dq-gpu-spec-ckpt}
gguf=${SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$out" "$ckpt"
[ -f "$gguf" ] || scripts/fetch-model.sh
for f in "bf16:" "int4:--group-size 64"; do
  name=${f%%:*} args=${f#*:}
  dir="$ckpt/smollm2-$name"
  [ "$name" = int4 ] && dir="$ckpt/smollm2-int4-g64"
  [ -d "$dir" ] || "$bin/dq-quantize" --model "$gguf" --out "$dir" --format "$name" $args \
    >"$out/quantize_$name.log" 2>&1 || { echo "FAIL: dq-quantize $name"; exit 1; }
done
machine="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
commit=${DQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
common=(--device cuda --draft-base "$ckpt/smollm2-bf16" --prompts 8 --gen-tokens 128 --k 4
  --batch 1 --batch 4 --reps "${REPS:-3}" --machine "$machine" --commit "$commit")
run() {  # name target arms...
  local name=$1 target=$2; shift 2
  local arms=()
  for a in "$@"; do arms+=(--arm "$a"); done
  timeout 600 "$bin/dq-bench-spec" --target "$target" "${arms[@]}" "${common[@]}" \
    >"$out/spec_$name.json" 2>"$out/spec_$name.log" || echo "FAIL: $name ($(tail -c 300 "$out/spec_$name.log"))"
}
run bf16 "$ckpt/smollm2-bf16" plain ngram self:int2:32 self:lut2 self:int4:64 self:bf16
run int4 "$ckpt/smollm2-int4-g64" plain ngram self:int2:32 self:lut2 self:int4:64
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
runs = []
for n in ("bf16", "int4"):
    try:
        text = open(f"{out}/spec_{n}.json").read()
        runs.append(json.loads(text[text.index("{"):]))  # older binaries logged to stdout first
    except (OSError, ValueError):
        continue
doc = {"benchmark": "speculative decoding, CUDA, SmolLM2-135M-Instruct", "script": "bench/gpu_spec.sh",
       "machine": runs[0]["machine"] if runs else None, "commit": runs[0]["commit"] if runs else None,
       "runs": runs}
json.dump(doc, open(f"{out}/gpu_spec_smollm2.json", "w"), indent=2)
for r in runs:
    print(r["target"])
    for x in r["results"]:
        print(f"  b={x['batch']} {x['arm']:14} {x['decode_tok_per_s']:7.1f} tok/s  x{x['speedup_vs_plain']:.2f}"
              f"  acc.len {x['acceptance_length']:.2f}  rate {x['acceptance_rate']:.2f}  same={x['identical_to_plain']}")
    print("  forward ms:", json.dumps(r.get("forward_costs")))
PY
