#!/usr/bin/env bash
# dq-quantize into every format, per-phase compute in dqserve generate, dq-tool fidelity, and the
# errors on bad quantized checkpoints.
source "$(dirname "$0")/lib.sh"
CAL=$SRC/tests/data/calib_text.txt

q() {  # q NAME FORMAT [extra flags]: quantize the tiny model into $TMP/NAME
  local name=$1 fmt=$2; shift 2
  "$BIN/dq-quantize" --model "$TINY" --format "$fmt" --out "$TMP/$name" "$@" >"$TMP/q.log" 2>&1 \
    && pass "quantize $name" || fail "quantize $name: $(tail -3 "$TMP/q.log")"
}
gen() {  # gen LABEL [dqserve generate flags]: must answer with a few tokens
  local label=$1; shift
  "$BIN/dqserve" generate --prompt "Tell me a story" --max-tokens 6 "$@" >"$TMP/g.out" 2>"$TMP/g.err" \
    && grep -q 'generated' "$TMP/g.err" && pass "generate $label" \
    || fail "generate $label: $(cat "$TMP/g.err")"
}

q nvfp4 nvfp4 --calib "$CAL"
grep -q 'layer 2/2' "$TMP/q.log" && pass "quantize shows progress" || fail "no progress: $(cat "$TMP/q.log")"
q fp8 fp8
q int4 int4 --group-size 32
q int3 int3 --group-size 64
q int2 int2 --group-size 32
q lut3 lut3
q lut2 lut2
q bf16 bf16
for m in nvfp4 fp8 int4 int3 int2 lut3 lut2 bf16; do gen "$m weight-only" --model "$TMP/$m"; done
gen "nvfp4 w4a4 prefill (format disaggregation)" --model "$TMP/nvfp4" --prefill-compute w4a4
gen "fp8 w8a8 prefill" --model "$TMP/fp8" --prefill-compute w8a8
gen "full disaggregation nvfp4 -> lut2" --model "$TMP/lut2" \
  --prefill-weights "$TMP/nvfp4" --prefill-compute w4a4 --decode-weights "$TMP/lut2"

"$BIN/dq-tool" fidelity --reference "$TINY" --text "$SRC/tests/data/fidelity_text.txt" \
  --tokens 96 --prefix 48 --json --run "bf16=$TMP/bf16" --run "nvfp4-w4a4=$TMP/nvfp4:w4a4" \
  --run "nvfp4-fmt-disagg=$TMP/nvfp4:w4a4,$TMP/nvfp4:weight_only" \
  --run "full-disagg=$TMP/nvfp4:w4a4,$TMP/lut2" >"$TMP/fid.json" 2>"$TMP/fid.err"
python3 - "$TMP/fid.json" <<'PY' && pass "fidelity json" || fail "fidelity: $(cat "$TMP/fid.err")"
import json, sys
r = {x["label"]: x for x in json.load(open(sys.argv[1]))["runs"]}
assert r["bf16"]["all"]["kl"] < r["nvfp4-w4a4"]["all"]["kl"], r
# Dropping activation quantization in decode only lowers the decode-side KL.
assert r["nvfp4-fmt-disagg"]["decode_side"]["kl"] < r["nvfp4-w4a4"]["decode_side"]["kl"], r
assert r["nvfp4-fmt-disagg"]["prefill_side"]["kl"] == r["nvfp4-w4a4"]["prefill_side"]["kl"], r
# A decode phase given without a mode runs weight-only (lut2 has no activation quantization).
assert r["full-disagg"]["decode"]["compute"] == "weight_only", r
assert r["full-disagg"]["prefill_side"]["kl"] == r["nvfp4-w4a4"]["prefill_side"]["kl"], r
PY

expect_error "unknown format" "unknown quantization format 'int5'.*known:" \
  "$BIN/dq-quantize" --model "$TINY" --format int5 --out "$TMP/x"
expect_error "w8a8 on int4 weights" "w8a8 needs fp8" \
  "$BIN/dqserve" generate --model "$TMP/int4" --prefill-compute w8a8 --prompt hi
cp -r "$TMP/int4" "$TMP/lying"
sed -i 's/"format": "int4"/"format": "nvfp4"/' "$TMP/lying/config.json"
expect_error "metadata disagrees with tensors" "model.layers.0.self_attn.q_proj" \
  "$BIN/dqserve" generate --model "$TMP/lying" --prompt hi
cp -r "$TMP/nvfp4" "$TMP/cut"
truncate -s $(( $(stat -c %s "$TMP/nvfp4/model.safetensors") - 100 )) "$TMP/cut/model.safetensors"
expect_error "truncated tensor" "safetensors.*(outside|past|truncat)" \
  "$BIN/dqserve" generate --model "$TMP/cut" --prompt hi
expect_error "already quantized source" "already quantized" \
  "$BIN/dq-quantize" --model "$TMP/int4" --format int2 --out "$TMP/y"
expect_error "different architectures" "KV layouts|tokenizer" \
  "$BIN/dqserve" generate --model "$TINY" --decode-weights "$SMOL" --prompt hi

if [ -f "$SMOL" ]; then
  "$BIN/dq-quantize" --model "$SMOL" --format fp8 --out "$TMP/smol-fp8" 2>"$TMP/q.log" \
    && pass "quantize SmolLM2 gguf -> fp8" || fail "quantize SmolLM2: $(tail -3 "$TMP/q.log")"
  out=$("$BIN/dqserve" generate --model "$TMP/smol-fp8" --prefill-compute w8a8 \
        --prompt "What is the capital of France?" --max-tokens 24 2>"$TMP/g.err")
  grep -q Paris <<<"$out" && pass "SmolLM2 fp8 w8a8: $out" || fail "SmolLM2 fp8: $out $(cat "$TMP/g.err")"
fi
finish
