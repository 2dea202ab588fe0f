#!/usr/bin/env bash
# CPU speculative decoding on SmolLM2-135M-Instruct: plain vs n-gram vs self-drafters, over a
# bf16 and an int4 (g64) target made from the Q4_1 GGUF, batch 1 and 4; then acceptance by
# drafter bit width (int2..int8 drafters over the bf16 target, batch 4, one run). Writes
# bench/results/cpu_spec_smollm2.json. Build first:
#   cmake --build build/release --target dq-bench-spec dq-quantize
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release/bin}
ckpt=${DQ_CKPT:-build/ckpt}
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
scripts/fetch-model.sh
[ -d "$ckpt/smollm2-bf16" ] || "$bin/dq-quantize" --model $gguf --out "$ckpt/smollm2-bf16" --format bf16
[ -d "$ckpt/smollm2-int4-g64" ] ||
  "$bin/dq-quantize" --model $gguf --out "$ckpt/smollm2-int4-g64" --format int4 --group-size 64
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
commit=$(git rev-parse --short HEAD)
common=(--draft-base "$ckpt/smollm2-bf16" --prompts 6 --gen-tokens 64 --k 4
  --threads "${THREADS:-2}" --machine "$machine" --commit "$commit" "$@")
speed=(--batch 1 --batch 4 --reps "${REPS:-2}")
out=$(mktemp -d)
"$bin/dq-bench-spec" --target "$ckpt/smollm2-bf16" --arm plain --arm ngram --arm self:int2:32 \
  --arm self:lut2 --arm self:bf16 "${speed[@]}" "${common[@]}" > "$out/bf16.json"
"$bin/dq-bench-spec" --target "$ckpt/smollm2-int4-g64" --arm plain --arm ngram \
  --arm self:int2:32 --arm self:lut2 --arm self:int4:64 "${speed[@]}" "${common[@]}" \
  > "$out/int4.json"
"$bin/dq-bench-spec" --target "$ckpt/smollm2-bf16" --arm plain --arm self:int2:64 \
  --arm self:int3:32 --arm self:lut3 --arm self:int4:64 --arm self:int8:64 --batch 4 --reps 1 \
  "${common[@]}" > "$out/bits.json"
python3 - "$out" <<'PY'
import json, sys
runs = [json.load(open(f"{sys.argv[1]}/{n}.json")) for n in ("bf16", "int4", "bits")]
doc = {"benchmark": "speculative decoding, CPU, SmolLM2-135M-Instruct", "script": "bench/cpu_spec.sh",
       "machine": runs[0]["machine"], "commit": runs[0]["commit"], "runs": runs}
json.dump(doc, open("bench/results/cpu_spec_smollm2.json", "w"), indent=2)
for r in runs:
    print(r["target"])
    for x in r["results"]:
        print(f"  b={x['batch']} {x['arm']:14} {x['decode_tok_per_s']:6.1f} tok/s  x{x['speedup_vs_plain']:.2f}"
              f"  acc.len {x['acceptance_length']:.2f}  rate {x['acceptance_rate']:.2f}  same={x['identical_to_plain']}")
PY
