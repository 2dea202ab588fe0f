#!/usr/bin/env bash
# On the GPU machine: `dqserve generate --odp` end to end (docs/odp.md). A tiny random Qwen3 is
# quantized by dq-quantize to fp8 (the prefill checkpoint) and int4 g64 (the decode checkpoint);
# greedy output must be token for token:
#   1. with every prompt streamed (--odp-crossover 1), from the image file and from pinned host
#      memory, with 2 and 3 slots: equal to the same full disaggregation held resident (no --odp);
#   2. with the crossover above the prompt (prefill on the resident int4 weights): equal to
#      plain generation on the int4 weights for both phases;
#   3. with the crossover measured at start-up: equal to one of the two above.
# Needs dqserve, dq-tool and dq-quantize of a CUDA build in $DQ_BIN (default
# build/release-cuda/bin). Logs go to $OUT (default /tmp/dq-odp-generate). Exit 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-odp-generate}
mkdir -p "$out"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

"$bin/dq-tool" make-tiny --out "$out/tiny" --seed 5 --hidden 256 --heads 4 --kv-heads 2 \
  --head-dim 64 --intermediate 512 --layers 5 \
  --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json \
  --chat-template tests/golden/chat/qwen3_template.jinja >/dev/null || { echo "FAIL: make-tiny"; exit 1; }
"$bin/dq-quantize" --model "$out/tiny" --out "$out/tiny-fp8" --format fp8 >"$out/q-fp8.log" 2>&1 ||
  { echo "FAIL: quantize fp8 ($(tail -2 "$out/q-fp8.log"))"; exit 1; }
"$bin/dq-quantize" --model "$out/tiny" --out "$out/tiny-int4" --format int4 --group-size 64 \
  >"$out/q-int4.log" 2>&1 || { echo "FAIL: quantize int4 ($(tail -2 "$out/q-int4.log"))"; exit 1; }

prompt="The streamed prefill must change nothing but time, whatever the prompt and its length."
# gen NAME ARGS...: the greedy answer on stdout; the log (spdlog writes to stdout, at info) and
# stderr go to $out/NAME.log.
gen() {
  local name=$1; shift
  "$bin/dqserve" --log-level info generate --device cuda --model "$out/tiny-int4" --raw \
    --prompt "$prompt" --max-tokens 24 "$@" >"$out/$name.out" 2>"$out/$name.err"
  local rc=$?
  cat "$out/$name.out" "$out/$name.err" >"$out/$name.log"
  grep -vE '^\[[0-9]{4}-[0-9]{2}-[0-9]{2} ' "$out/$name.out"
  return $rc
}
disagg=(--prefill-weights "$out/tiny-fp8" --prefill-compute w8a8 --decode-weights "$out/tiny-int4")

want=$(gen resident "${disagg[@]}") || { echo "FAIL: resident run: $(tail -3 "$out/resident.log")"; exit 1; }
[ -n "$want" ] || fail "resident run printed nothing"
for source in disk host; do
  for slots in 2 3; do
    name="odp-$source-$slots"
    got=$(gen "$name" "${disagg[@]}" --odp --odp-crossover 1 --odp-source "$source" \
          --odp-slots "$slots" --odp-image-dir "$out")
    rc=$?
    if [ $rc -ne 0 ]; then fail "$name: exit $rc: $(tail -3 "$out/$name.log")"
    elif [ "$got" != "$want" ]; then fail "$name differs from resident: '$got' vs '$want'"
    elif ! grep -q "layers streamed" "$out/$name.log"; then fail "$name: no streaming log line"
    else pass "$name equals resident full disaggregation"
    fi
  done
done
[ -z "$(ls "$out"/dq-odp-*.img 2>/dev/null)" ] && pass "image files removed at exit" ||
  fail "image files left behind: $(ls "$out"/dq-odp-*.img)"

int4_only=$(gen int4-only) || fail "int4-only run: $(tail -3 "$out/int4-only.log")"
got=$(gen odp-short "${disagg[@]}" --odp --odp-crossover 100000 --odp-image-dir "$out")
[ "$got" = "$int4_only" ] && pass "below the crossover: prefill on the resident int4 weights" ||
  fail "below the crossover: '$got' vs int4-only '$int4_only'"

got=$(gen odp-calibrated "${disagg[@]}" --odp --odp-image-dir "$out")
rc=$?
if [ $rc -ne 0 ]; then fail "calibrated: exit $rc: $(tail -3 "$out/odp-calibrated.log")"
elif [ "$got" = "$want" ] || [ "$got" = "$int4_only" ]; then
  pass "calibrated: $(grep -oE 'odp: (prompts of [0-9]+ tokens or more prefill on the streamed checkpoint|streaming was slower.*)' "$out/odp-calibrated.log" | head -1)"
else fail "calibrated output matches neither path: '$got'"
fi

if [ "$failures" -ne 0 ]; then echo "$failures failure(s) (logs: $out)"; exit 1; fi
echo "all passed"
