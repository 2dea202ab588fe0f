#!/usr/bin/env bash
# On the GPU machine: FP8 prefill attention reached through the CLI (docs/serving.md). A tiny
# random Qwen3 with head_dim 128 is quantized by dq-quantize to fp8; then
#   1. `dqserve generate --prefill-compute w8a8 --prefill-attention fp8` runs, and the engine logs
#      that it uses FP8 attention (and does not without the flag);
#   2. the same with --odp --odp-crossover 1: the streamed fp8 prefill model uses it;
#   3. a head_dim 64 fp8 checkpoint is refused after loading (exit 1, the reason named);
#   4. `dq-prefill --compute w8a8 --attention fp8 --device cuda:0` starts serving with it, and
#      refuses the head_dim 64 checkpoint.
# Output equality is not checked: FP8 attention changes the numerics (tests/gpu/attention_test.cpp
# bounds that). Needs dqserve, dq-prefill, dq-tool and dq-quantize of a CUDA build in $DQ_BIN
# (default build/release-cuda/bin). Logs go to $OUT (default /tmp/dq-prefill-attention).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-prefill-attention}
mkdir -p "$out"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

make_fp8() {  # make_fp8 NAME HEAD_DIM
  "$bin/dq-tool" make-tiny --out "$out/$1" --seed 7 --hidden 256 --heads 4 --kv-heads 2 \
    --head-dim "$2" --intermediate 512 --layers 3 \
    --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json \
    --chat-template tests/golden/chat/qwen3_template.jinja >/dev/null ||
    { echo "FAIL: make-tiny $1"; exit 1; }
  "$bin/dq-quantize" --model "$out/$1" --out "$out/$1-fp8" --format fp8 >"$out/q-$1.log" 2>&1 ||
    { echo "FAIL: quantize $1 ($(tail -2 "$out/q-$1.log"))"; exit 1; }
}
make_fp8 hd128 128
make_fp8 hd64 64

prompt="FP8 attention changes the prefill's numerics a little and its speed a lot."
gen() {  # gen NAME BASE ARGS...: exit code of dqserve generate; all output in $out/NAME.log
  local name=$1 base=$2; shift 2
  "$bin/dqserve" --log-level info generate --device cuda --model "$out/$base" --raw \
    --prompt "$prompt" --max-tokens 8 --prefill-weights "$out/$base-fp8" --prefill-compute w8a8 \
    "$@" >"$out/$name.log" 2>&1
}
uses_fp8() { grep -q "FP8 prefill attention" "$out/$1.log"; }

gen plain hd128 || fail "plain: exit $?: $(tail -3 "$out/plain.log")"
uses_fp8 plain && fail "plain: FP8 attention without the flag" || pass "plain: bf16 attention"
if gen fp8 hd128 --prefill-attention fp8; then
  uses_fp8 fp8 && pass "--prefill-attention fp8: $(grep -o 'FP8 prefill attention.*' "$out/fp8.log" | head -1)" ||
    fail "--prefill-attention fp8: no FP8 attention log line"
else
  fail "--prefill-attention fp8: exit $?: $(tail -3 "$out/fp8.log")"
fi
if gen odp hd128 --decode-weights "$out/hd128" --odp --odp-crossover 1 --odp-image-dir "$out" \
  --prefill-attention fp8; then
  uses_fp8 odp && grep -q "layers streamed" "$out/odp.log" &&
    pass "--odp --prefill-attention fp8: the streamed model uses it" ||
    fail "--odp --prefill-attention fp8: no FP8 attention or streaming log line"
else
  fail "--odp --prefill-attention fp8: exit $?: $(tail -3 "$out/odp.log")"
fi
gen hd64 hd64 --prefill-attention fp8
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot run FP8 prefill attention.*head_dim 128" "$out/hd64.log"; then
  pass "head_dim 64 refused: $(grep -o 'error:.*' "$out/hd64.log" | head -1)"
else
  fail "head_dim 64: rc $rc: $(tail -3 "$out/hd64.log")"
fi

# dq-prefill: serves with it; refuses what cannot use it.
"$bin/dq-prefill" --model "$out/hd128" --weights "$out/hd128-fp8" --compute w8a8 --device cuda:0 \
  --attention fp8 --port 19473 >"$out/pf.log" 2>&1 &
pf=$!
for _ in $(seq 120); do
  grep -q "serving on" "$out/pf.log" && break
  kill -0 $pf 2>/dev/null || break
  sleep 0.5
done
if grep -q "serving on" "$out/pf.log" && grep -q "FP8 prefill attention" "$out/pf.log"; then
  pass "dq-prefill --attention fp8 serves with FP8 attention"
else
  fail "dq-prefill --attention fp8: $(tail -3 "$out/pf.log")"
fi
kill $pf 2>/dev/null
wait $pf 2>/dev/null
"$bin/dq-prefill" --model "$out/hd64" --weights "$out/hd64-fp8" --compute w8a8 --device cuda:0 \
  --attention fp8 --port 19474 >"$out/pf64.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot run FP8 prefill attention" "$out/pf64.log"; then
  pass "dq-prefill refuses head_dim 64"
else
  fail "dq-prefill head_dim 64: rc $rc: $(tail -3 "$out/pf64.log")"
fi

if [ "$failures" -ne 0 ]; then echo "$failures failure(s) (logs: $out)"; exit 1; fi
echo "all passed"
