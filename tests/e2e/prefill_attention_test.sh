#!/usr/bin/env bash
# FP8 prefill attention's switches through the CLI (docs/serving.md): `dqserve generate
# --prefill-attention`, `dq-prefill --attention` and `[prefill] attention` are refused with a
# clear message and exit code 2 where FP8 attention cannot apply (a compute mode other than w8a8,
# an unknown value) before any weight is read; on the CPU with an fp8 checkpoint and w8a8 they
# run, FP8 attention emulated (and say so); `dqserve up` passes `--attention fp8` to dq-prefill
# (also under ODP and on the CPU) and nothing when it is off.
source "$(dirname "$0")/lib.sh"

# expect_refusal NAME RC PATTERN CMD...: the command exits with RC and its output matches PATTERN.
expect_refusal() {
  local name=$1 want=$2 pattern=$3; shift 3
  "$@" >"$TMP/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ]; then fail "$name: exit code $rc (want $want): $(head -c 400 "$TMP/out")"
  elif ! grep -qE -- "$pattern" "$TMP/out"; then fail "$name: no /$pattern/ in: $(cat "$TMP/out")"
  else pass "$name: $(grep -E -- "$pattern" "$TMP/out" | head -1)"
  fi
}

gen() { "$BIN/dqserve" generate --model "$TINY" --prompt hi --max-tokens 1 "$@"; }

# dqserve generate: checked with the other argument errors (exit 2), before the model loads.
expect_refusal "generate --prefill-attention fp8 on the CPU without w8a8" 2 \
  "^error: --prefill-attention fp8 is only for --prefill-compute w8a8 .*got --device cpu --prefill-compute weight_only; use --prefill-attention bf16" \
  gen --device cpu --prefill-attention fp8
expect_refusal "generate --prefill-attention fp8 without w8a8" 2 \
  "^error: --prefill-attention fp8 is only for .*got --device cuda --prefill-compute weight_only; use --prefill-attention bf16" \
  gen --device cuda --prefill-attention fp8
expect_refusal "generate --odp --prefill-attention fp8 with w4a4" 2 \
  "^error: --prefill-attention fp8 is only for .*--prefill-compute w4a4" \
  gen --device cuda --odp --prefill-weights "$TINY" --prefill-compute w4a4 --prefill-attention fp8
expect_refusal "generate --prefill-attention with a bad value" 2 \
  "^error: --prefill-attention must be bf16 or fp8, got 'fp16'" \
  gen --device cpu --prefill-attention fp16
# bf16 is the default and changes nothing.
"$BIN/dqserve" generate --model "$TINY" --prompt hi --max-tokens 2 --prefill-attention bf16 \
  >"$TMP/gen_out" 2>"$TMP/gen_err"
rc=$?
if [ $rc -eq 0 ] && grep -q "prompt tokens" "$TMP/gen_err"; then
  pass "generate --prefill-attention bf16 on the CPU runs"
else
  fail "generate --prefill-attention bf16: rc $rc, $(tail -3 "$TMP/gen_err")"
fi

# On the CPU with FP8 weights and w8a8: FP8 attention is emulated, and the run says so.
"$BIN/dq-quantize" --model "$TINY" --format fp8 --out "$TMP/tiny-fp8" >"$TMP/q.log" 2>&1 \
  || fail "dq-quantize --format fp8: $(tail -3 "$TMP/q.log")"
gen_fp8() {
  "$BIN/dqserve" generate --model "$TMP/tiny-fp8" --prompt "hello there, how are you" \
    --max-tokens 2 --device cpu --prefill-compute w8a8 "$@"
}
gen_fp8 --prefill-attention fp8 >"$TMP/gen_out" 2>"$TMP/gen_err"
rc=$?
if [ $rc -eq 0 ] && grep -q "prompt tokens" "$TMP/gen_err" &&
  grep -q "^\[prefill attention: FP8 (e4m3 Q/K/V/P), emulated on the CPU\]" "$TMP/gen_err"; then
  pass "generate --prefill-attention fp8 on the CPU runs, emulated: $(grep -m1 'prefill attention' "$TMP/gen_err")"
else
  fail "generate --prefill-attention fp8 on the CPU: rc $rc, $(tail -3 "$TMP/gen_err")"
fi
gen_fp8 >"$TMP/gen_out" 2>"$TMP/gen_err"
if grep -q "prefill attention: FP8" "$TMP/gen_err"; then
  fail "generate without --prefill-attention says FP8: $(cat "$TMP/gen_err")"
else
  pass "generate without --prefill-attention: exact attention"
fi
expect_refusal "generate --prefill-attention fp8 with w8a8 on bf16 weights" 1 \
  "^error: compute mode w8a8 needs fp8 weights" \
  gen --device cpu --prefill-compute w8a8 --prefill-attention fp8

# dq-prefill: refused before any weight is read (a missing model is not even looked at).
pf() { "$BIN/dq-prefill" --port 1 "$@"; }
not_loaded() {  # the refusal came before the (missing) model was looked at
  if grep -qi "no-such-model" "$TMP/out"; then fail "$1 looked at the model first: $(cat "$TMP/out")"; fi
}
expect_refusal "dq-prefill --attention fp8 on the CPU without w8a8" 2 \
  "dq-prefill: --attention fp8 is only for --compute w8a8 .*got --compute weight_only --device cpu" \
  pf --model "$TMP/no-such-model" --device cpu --attention fp8
not_loaded "dq-prefill --attention fp8 on the CPU without w8a8"
expect_refusal "dq-prefill --attention fp8 without w8a8" 2 \
  "dq-prefill: --attention fp8 is only for .*got --compute weight_only --device cuda:0; use --attention bf16" \
  pf --model "$TMP/no-such-model" --device cuda:0 --attention fp8
not_loaded "dq-prefill --attention fp8 without w8a8"
expect_refusal "dq-prefill --attention with a bad value" 105 "--attention: fp16 not in \{bf16,fp8\}" \
  pf --model "$TINY" --device cpu --attention fp16
# On the CPU with FP8 weights: it loads, serves and says FP8 attention is emulated.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN/dq-prefill" --port "$port" --model "$TMP/tiny-fp8" --compute w8a8 --device cpu \
  --attention fp8 >"$TMP/pf.log" 2>&1 &
pf_pid=$!
for _ in $(seq 1 100); do
  grep -q "serving on" "$TMP/pf.log" && break
  kill -0 "$pf_pid" 2>/dev/null || break
  sleep 0.2
done
if grep -q "prefill attention in FP8 (e4m3 Q/K/V/P), emulated on the CPU" "$TMP/pf.log" &&
  grep -q "serving on" "$TMP/pf.log"; then
  pass "dq-prefill --attention fp8 on the CPU serves, emulated"
else
  fail "dq-prefill --attention fp8 on the CPU: $(tail -5 "$TMP/pf.log")"
fi
kill "$pf_pid" 2>/dev/null
wait "$pf_pid" 2>/dev/null

# dqserve up: [prefill] attention checked with the config (exit 2), passed on as --attention.
up_config() {  # up_config NAME EXTRA_TOP PREFILL_LINES DECODE_DEVICE
  cat >"$TMP/$1.toml" <<EOF
model = "$TINY"
$2
[prefill]
$3
[decode]
device = "$4"
EOF
}
up_config bad "" 'compute = "w8a8"
device = "cuda:0"
attention = "fp16"' cuda:1
expect_refusal "up: [prefill] attention with a bad value" 2 \
  '\[prefill\] attention must be "bf16" or "fp8", got "fp16"' \
  "$BIN/dqserve" up --config "$TMP/bad.toml" --print-commands
up_config cpu_wo "" 'attention = "fp8"' cpu
expect_refusal "up: [prefill] attention = fp8 without w8a8" 2 \
  '\[prefill\] attention = "fp8" is only for compute = "w8a8" \(got compute = "weight_only"\)' \
  "$BIN/dqserve" up --config "$TMP/cpu_wo.toml" --print-commands
up_config cpu "" 'weights = "ckpt/fp8"
compute = "w8a8"
attention = "fp8"' cpu

prefill_argv() {  # prefill_argv CONFIG: dq-prefill's argv from --print-commands, one per line
  "$BIN/dqserve" up --config "$1" --print-commands >"$TMP/commands" || return 1
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["name"] == "prefill": print("\n".join(j["argv"]))' "$TMP/commands"
}
up_config gpus "" 'weights = "ckpt/fp8"
compute = "w8a8"
device = "cuda:0"
attention = "fp8"' cuda:1
up_config odp "odp = true" 'weights = "ckpt/fp8"
compute = "w8a8"
device = "cuda:0"
attention = "fp8"' cuda:0
up_config off "" 'weights = "ckpt/fp8"
compute = "w8a8"
device = "cuda:0"' cuda:1
for c in gpus odp off cpu; do
  prefill_argv "$TMP/$c.toml" >"$TMP/$c.argv" || fail "up ($c) --print-commands failed"
done
for c in gpus odp cpu; do
  got=$(grep -A1 -x -- "--attention" "$TMP/$c.argv" | tail -n +2)
  if [ "$got" = "fp8" ]; then pass "up ($c): dq-prefill gets --attention fp8"
  else fail "up ($c): dq-prefill's --attention is '$got': $(tr '\n' ' ' <"$TMP/$c.argv")"
  fi
done
if grep -qx -- "--odp-resident-weights" "$TMP/odp.argv"; then
  pass "up (odp): the prefill worker streams under ODP"
else
  fail "up (odp): no --odp-resident-weights: $(tr '\n' ' ' <"$TMP/odp.argv")"
fi
if grep -qx -- "--port" "$TMP/off.argv" && ! grep -qx -- "--attention" "$TMP/off.argv"; then
  pass "up (default): no --attention flag"
else
  fail "up (default): $(tr '\n' ' ' <"$TMP/off.argv")"
fi
finish
