#!/usr/bin/env bash
# On the GPU machine: `dqserve up` with ODP (docs/odp.md). Tiny random Qwen3s quantized by
# dq-quantize to fp8 (the prefill checkpoint) and int4 g64 (the decode checkpoint), both workers on
# cuda:0, [odp] crossover_tokens = 1 (every prompt streams): the prefill worker says it streams,
# and a greedy completion through the router equals `dqserve generate` with the same full
# disaggregation held resident, token for token. Two cases: head_dim 64 with bf16 attention, and
# head_dim 128 with `[prefill] attention = "fp8"` (FP8 prefill attention on the streamed model;
# the reference runs generate --prefill-attention fp8). Needs dqserve, dq-router, dq-prefill,
# dq-decode, dq-tool and dq-quantize of a CUDA build in $DQ_BIN (default build/release-cuda/bin);
# python3. Logs go to $OUT (default /tmp/dq-odp-serve). Exit 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-odp-serve}
mkdir -p "$out"
failures=0
# shellcheck source=tests/gpu/serve_lib.sh
source tests/gpu/serve_lib.sh
prompt="Offloaded prefill streams the weights and changes nothing else about the answer"
n=16

# complete PORT: a greedy completion of $prompt through the router, or "HTTP <status>: <body>".
complete() {
  PORT=$1 PROMPT=$prompt N=$n python3 -c '
import os, sys
sys.path.insert(0, "tests/gpu")
from serve_client import Router
print(Router(os.environ["PORT"]).complete(os.environ["PROMPT"], int(os.environ["N"])), end="")'
}

# run_case NAME HEAD_DIM ATTENTION (bf16 | fp8)
run_case() {
  local d="$out/$1" hd=$2 attn=$3
  mkdir -p "$d"
  "$bin/dq-tool" make-tiny --out "$d/tiny" --seed 7 --hidden 256 --heads 4 --kv-heads 2 \
    --head-dim "$hd" --intermediate 512 --layers 5 \
    --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json >/dev/null ||
    { fail "$1: make-tiny"; return; }
  "$bin/dq-quantize" --model "$d/tiny" --out "$d/fp8" --format fp8 >"$d/q.log" 2>&1 &&
    "$bin/dq-quantize" --model "$d/tiny" --out "$d/int4" --format int4 --group-size 64 \
      >>"$d/q.log" 2>&1 || { fail "$1: dq-quantize: $(tail -3 "$d/q.log")"; return; }
  local want
  want=$("$bin/dqserve" generate --device cuda --model "$d/int4" --raw --prompt "$prompt" \
    --max-tokens $n --prefill-weights "$d/fp8" --prefill-compute w8a8 \
    --prefill-attention "$attn" --decode-weights "$d/int4" 2>"$d/ref.err") ||
    { fail "$1: reference: $(tail -3 "$d/ref.err")"; return; }
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$d/odp.toml" <<TOML
model = "$d/int4"
[router]
port = $port
[prefill]
weights = "$d/fp8"
compute = "w8a8"
attention = "$attn"
device = "cuda:0"
token_budget = 4096
[decode]
weights = "$d/int4"
device = "cuda:0"
[odp]
crossover_tokens = 1
image_dir = "$d"
TOML
  start_up "$d/odp.toml" "$d/up.log" --worker-log-level info || return
  grep -q "layers streamed" "$d/up.log" && pass "$1: the prefill worker streams its layers" ||
    fail "$1: no 'layers streamed' line in $d/up.log"
  if [ "$attn" = fp8 ]; then
    grep -q "FP8 prefill attention" "$d/up.log" && pass "$1: the streamed model runs FP8 attention" ||
      fail "$1: no 'FP8 prefill attention' line in $d/up.log"
  fi
  local got
  got=$(complete "$port")
  [ "$got" = "$want" ] && pass "$1: completion through ODP == resident full disaggregation: '$got'" ||
    fail "$1: completion '$got' differs from the resident reference '$want'"
  kill -INT $up; wait $up
  local rc=$?
  [ $rc -eq 0 ] && pass "$1: Ctrl-C stops the deployment" || fail "$1: dqserve up exited $rc"
  [ -z "$(ls "$d"/dq-odp-*.img 2>/dev/null)" ] && pass "$1: image file removed at exit" ||
    fail "$1: image left behind: $(ls "$d"/dq-odp-*.img)"
}

run_case hd64-bf16attn 64 bf16
run_case hd128-fp8attn 128 fp8
if [ "$failures" -ne 0 ]; then echo "$failures failure(s) (logs: $out)"; exit 1; fi
echo "all passed"
