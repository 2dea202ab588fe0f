#!/usr/bin/env bash
# The per-format fidelity report on SmolLM2-135M-Instruct (issue: quantization formats):
# quantizes the default model into every format, then runs dq-tool fidelity against the model as
# shipped (the Q4_1 GGUF dequantized to f32) over tests/data/fidelity_text.txt.
# Writes docs/fidelity.json and docs/fidelity.md.   Usage: scripts/fidelity-report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${DQ_SKIP_SETUP:-0}" = 1 ] || scripts/setup.sh release >&2
bin=${DQ_BIN:-build/release/bin}
ref=models/SmolLM2-135M-Instruct.Q4_1.gguf
work=${DQ_WORK:-build/fidelity}
tokens=${TOKENS:-512}
prefix=${PREFIX:-256}
mkdir -p "$work"
# SmolLM2's widths (576, 1536) are multiples of 64, not 128.
for spec in bf16 fp8 nvfp4 int4:64 int3:64 int2:32 lut3 lut2; do
  fmt=${spec%%:*}; group=""
  [[ $spec == *:* ]] && group="--group-size ${spec##*:}"
  [ -f "$work/$fmt/model.safetensors" ] && continue
  "$bin/dq-quantize" --model "$ref" --format "$fmt" $group --calib tests/data/calib_text.txt \
    --out "$work/$fmt"
done
w=$work
"$bin/dq-tool" fidelity --reference "$ref" --text tests/data/fidelity_text.txt \
  --tokens "$tokens" --prefix "$prefix" --json \
  --run "bf16=$w/bf16" \
  --run "fp8 w8a8=$w/fp8:w8a8" \
  --run "fp8 w8a8 + fp8 attention=$w/fp8:w8a8+fp8attn" \
  --run "nvfp4 w4a4 (both phases)=$w/nvfp4:w4a4" \
  --run "nvfp4a16 (both phases)=$w/nvfp4" \
  --run "nvfp4 format-disagg=$w/nvfp4:w4a4,$w/nvfp4:weight_only" \
  --run "int4 g64=$w/int4" \
  --run "int3 g64=$w/int3" \
  --run "int2 g32=$w/int2" \
  --run "lut3=$w/lut3" \
  --run "lut2=$w/lut2" \
  --run "full disagg nvfp4 -> lut2=$w/nvfp4:w4a4,$w/lut2" \
  --run "full disagg nvfp4 -> int2=$w/nvfp4:w4a4,$w/int2" \
  >docs/fidelity.json
python3 - docs/fidelity.json docs/fidelity.md "$(git rev-parse --short HEAD)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
lines = [
    "# Fidelity of each per-phase format on SmolLM2-135M-Instruct",
    "",
    f"Reference: `{r['reference']}` dequantized to f32 (the model as shipped). Text: "
    f"`{r['text']}`, {r['tokens']} tokens teacher-forced; the first {r['prefix']} run as one "
    "prefill on the prefill weights, the rest as single-token decode steps on the decode "
    "weights. KL = mean KL(reference || run) of the next-token distributions, nats.",
    f"Produced by `scripts/fidelity-report.sh` at commit {sys.argv[3]} (`dq-tool fidelity --json`).",
    "",
    "| run | prefill | decode | KL prefill-side | top-1 prefill | KL decode-side | top-1 decode | ppl (all) |",
    "|---|---|---|---|---|---|---|---|",
]
for x in r["runs"]:
    p, d, a = x["prefill_side"], x["decode_side"], x["all"]
    # FP8 prefill attention (CPU emulation of the CUDA kernel's numerics): "+fp8attn".
    attn = " +fp8attn" if x["prefill"].get("attention", "exact") != "exact" else ""
    lines.append(
        f"| {x['label']} | {x['prefill']['weights'].split('/')[-1]} {x['prefill']['compute']}{attn} | "
        f"{x['decode']['weights'].split('/')[-1]} {x['decode']['compute']} | {p['kl']:.4f} | "
        f"{100*p['top1_agreement']:.1f} % | {d['kl']:.4f} | {100*d['top1_agreement']:.1f} % | "
        f"{a['perplexity']:.3f} |")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
