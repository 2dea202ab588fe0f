#!/usr/bin/env bash
# The accuracy matrix of docs/accuracy.md: SmolLM2-135M-Instruct on the CPU, one `dqserve up`
# per deployment (prefill format x decode format), `dq-eval run` on the same tasks against each,
# `dq-eval fidelity` against the model as shipped (Q4_1 GGUF, served alongside), then one report.
#   eval/matrix.sh                       # every deployment
#   ONLY="bf16,int2 g32" eval/matrix.sh  # some (labels as below); finished items are kept
# Env: DQ_BIN (build/release/bin), DQ_WORK (quantized checkpoints, shared with
# scripts/fidelity-report.sh: build/fidelity), OUT (build/accuracy), TASKS, LIMIT, LENGTH,
# THREADS (per worker, 0 = all), CONCURRENCY, FIDELITY_WINDOWS.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release/bin}
work=${DQ_WORK:-build/fidelity}
out=${OUT:-build/accuracy}
tasks=${TASKS:-arith,units,ruler-niah,ruler-vt,mc-arith}
limit=${LIMIT:-40}
length=${LENGTH:-1024}
threads=${THREADS:-0}
concurrency=${CONCURRENCY:-4}
windows=${FIDELITY_WINDOWS:-4}
ref=$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$out"

# label | prefill weights | prefill compute | decode weights | decode compute
DEPLOYMENTS=(
  "q4_1 (as shipped)|$ref|weight_only|$ref|weight_only"
  "bf16|bf16|weight_only|bf16|weight_only"
  "fp8 w8a8|fp8|w8a8|fp8|w8a8"
  "nvfp4 w4a4|nvfp4|w4a4|nvfp4|w4a4"
  "nvfp4a16|nvfp4|weight_only|nvfp4|weight_only"
  "nvfp4 format-disagg|nvfp4|w4a4|nvfp4|weight_only"
  "int4 g64|int4|weight_only|int4|weight_only"
  "int3 g64|int3|weight_only|int3|weight_only"
  "int2 g32|int2|weight_only|int2|weight_only"
  "lut3|lut3|weight_only|lut3|weight_only"
  "lut2|lut2|weight_only|lut2|weight_only"
  "full disagg nvfp4 -> int2|nvfp4|w4a4|int2|weight_only"
  "full disagg nvfp4 -> lut2|nvfp4|w4a4|lut2|weight_only"
)

# shellcheck source=eval/lib.sh
source eval/lib.sh
# The checkpoints, as scripts/fidelity-report.sh makes them (SmolLM2's widths are multiples of
# 64, not 128).
quantize_formats "$bin/dq-quantize" "$ref" "$work" bf16 fp8 nvfp4 int4:64 int3:64 int2:32 lut3 lut2
weights() { [[ $1 == /* ]] && echo "$1" || echo "$PWD/$work/$1"; }
pids=()
up() {  # up NAME PREFILL_W PREFILL_C DECODE_W DECODE_C: sets PORT once serving
  local name=$1 port; port=$(free_port)
  cat >"$out/$name.toml" <<TOML
model = "$ref"
served_model_name = "smollm2"
[router]
port = $port
request_timeout_ms = 1800000
[prefill]
weights = "$(weights "$2")"
compute = "$3"
threads = $threads
[decode]
weights = "$(weights "$4")"
compute = "$5"
threads = $threads
lease_ttl_ms = 1800000
TOML
  "$bin/dqserve" up --config "$out/$name.toml" >"$out/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 900); do
    grep -q "dqserve: serving" "$out/$name.log" && { PORT=$port; return 0; }
    sleep 0.2
  done
  echo "dqserve up for $name did not start; see $out/$name.log" >&2; return 1
}
down() { kill -TERM "${pids[-1]}" && wait "${pids[-1]}" || true; unset 'pids[-1]'; }
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done' EXIT

up reference "$ref" weight_only "$ref" weight_only
ref_port=$PORT
dirs=()
for d in "${DEPLOYMENTS[@]}"; do
  IFS='|' read -r label pw pc dw dc <<<"$d"
  slug=$(echo "$label" | tr -c 'a-zA-Z0-9\n' '-' | tr -s '-')
  dirs+=("$out/$slug")
  if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$label,"* ]]; then continue; fi
  echo "=== $label" >&2
  up "$slug" "$pw" "$pc" "$dw" "$dc"
  port=$PORT
  eval/dq-eval run --endpoint "http://127.0.0.1:$port" --tasks "$tasks" --limit "$limit" \
    --length "$length" --concurrency "$concurrency" --label "$label" --out "$out/$slug" \
    --no-report -q || echo "dq-eval run for $label failed; rerun to resume" >&2
  eval/dq-eval fidelity --endpoint "http://127.0.0.1:$port" \
    --reference "http://127.0.0.1:$ref_port" --windows "$windows" --out "$out/$slug" \
    >/dev/null || echo "dq-eval fidelity for $label failed" >&2
  down
done
existing=()
for d in "${dirs[@]}"; do [ -f "$d/manifest.json" ] && existing+=("$d"); done
eval/dq-eval report "${existing[@]}" --out "$out" \
  --title "Accuracy of each per-phase format on SmolLM2-135M-Instruct (CPU)"
