#!/usr/bin/env bash
# The multi-turn cache-policy table of docs/accuracy.md: SmolLM2-135M-Instruct in two
# disaggregated deployments (format-disaggregated NVFP4: W4A4 prefill, NVFP4A16 decode; full
# disaggregation: NVFP4 W4A4 prefill, int4 g64 decode), each served twice by `dqserve up` with the
# decode worker's prefix cache keeping conversations' KV ([prefix_cache] assistant_kv):
# "reprefill" (an earlier turn's answer is prefilled again with the prefill weights) and "reuse"
# (its KV as decode wrote it, with the decode weights); `dq-eval run --tasks multiturn,multiturn-3`
# against each, then one report.
#   eval/multiturn_policy.sh                  # on the CPU
#   DEVICE=cuda:0 eval/multiturn_policy.sh    # both workers on one GPU (release-cuda binaries)
# Env: DQ_BIN (build/release/bin), DQ_QUANTIZE (dq-quantize; default $DQ_BIN's), DQ_WORK
# (quantized checkpoints: build/fidelity), OUT (build/multiturn), LIMIT (conversations per
# task, 100), DEVICE (cpu), THREADS (per worker, 0 = all), CONCURRENCY (4).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release/bin}
quantize=${DQ_QUANTIZE:-$bin/dq-quantize}
work=${DQ_WORK:-build/fidelity}
out=${OUT:-build/multiturn}
limit=${LIMIT:-100}
device=${DEVICE:-cpu}
threads=${THREADS:-0}
concurrency=${CONCURRENCY:-4}
ref=$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$out"

# label | prefill weights | prefill compute | decode weights | decode compute
DEPLOYMENTS=(
  "nvfp4 format-disagg|nvfp4|w4a4|nvfp4|weight_only"
  "full disagg nvfp4 -> int4 g64|nvfp4|w4a4|int4|weight_only"
)
# shellcheck source=eval/lib.sh
source eval/lib.sh
quantize_formats "$quantize" "$ref" "$work" nvfp4 int4:64
weights() {  # a format's checkpoint under $work (absolute or relative to the checkout)
  [[ $work == /* ]] && echo "$work/$1" || echo "$PWD/$work/$1"
}
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true' EXIT
dirs=()
for d in "${DEPLOYMENTS[@]}"; do
  IFS='|' read -r label pw pc dw dc <<<"$d"
  for policy in reprefill reuse; do
    slug=$(echo "$label $policy" | tr -c 'a-zA-Z0-9\n' '-' | tr -s '-')
    port=$(free_port)
    cat >"$out/$slug.toml" <<TOML
model = "$ref"
served_model_name = "smollm2"
[router]
port = $port
request_timeout_ms = 1800000
[prefill]
weights = "$(weights "$pw")"
compute = "$pc"
device = "$device"
threads = $threads
[decode]
weights = "$(weights "$dw")"
compute = "$dc"
device = "$device"
threads = $threads
lease_ttl_ms = 1800000
[prefix_cache]
assistant_kv = "$policy"
TOML
    echo "=== $label, assistant_kv = $policy" >&2
    "$bin/dqserve" up --config "$out/$slug.toml" >"$out/$slug.log" 2>&1 &
    pid=$!
    for _ in $(seq 900); do grep -q "dqserve: serving" "$out/$slug.log" && break; sleep 0.2; done
    grep -q "dqserve: serving" "$out/$slug.log" || { echo "no deployment; see $out/$slug.log" >&2; exit 1; }
    eval/dq-eval run --endpoint "http://127.0.0.1:$port" --tasks multiturn,multiturn-3 \
      --limit "$limit" --concurrency "$concurrency" --label "$label, assistant_kv $policy" \
      --out "$out/$slug" --no-report -q || echo "dq-eval run for $slug failed" >&2
    kill -TERM "$pid" && wait "$pid" || true
    pid=""
    dirs+=("$out/$slug")
  done
done
eval/dq-eval report "${dirs[@]}" --out "$out" \
  --title "Multi-turn recall under the decode worker's cache policy (SmolLM2-135M-Instruct)"
