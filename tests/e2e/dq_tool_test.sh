#!/usr/bin/env bash
# dq-tool tokenize / detokenize / inspect / logits on the tiny model and the default model.
source "$(dirname "$0")/lib.sh"

ids=$("$BIN/dq-tool" tokenize --model "$TINY" --text "Hello, world! 123")
[[ "$ids" =~ ^\[[0-9,]+\]$ ]] && pass "tokenize prints a JSON array: $ids" || fail "tokenize: $ids"
text=$("$BIN/dq-tool" detokenize --model "$TINY" --ids "$ids")
[ "$text" = "Hello, world! 123" ] && pass "detokenize round trip" || fail "round trip: '$text'"
printf 'from a file\nline two' >"$TMP/t.txt"
fids=$("$BIN/dq-tool" tokenize --model "$TINY" --file "$TMP/t.txt")
[ "$("$BIN/dq-tool" detokenize --model "$TINY" --ids "$fids")" = "$(cat "$TMP/t.txt")" ] \
  && pass "tokenize --file" || fail "tokenize --file"
expect_error "detokenize bad json" "JSON array" "$BIN/dq-tool" detokenize --model "$TINY" --ids "1,2"
expect_error "detokenize bad id" "not in" "$BIN/dq-tool" detokenize --model "$TINY" --ids "[-5]"

"$BIN/dq-tool" inspect "$TINY" >"$TMP/inspect" && grep -q "model.layers.0.self_attn.q_norm.weight" "$TMP/inspect" \
  && pass "inspect tiny" || fail "inspect tiny: $(head -5 "$TMP/inspect")"
if [ -f "$SMOL" ]; then
  "$BIN/dq-tool" inspect "$SMOL" >"$TMP/inspect2" && grep -q "blk.29.ffn_down.weight" "$TMP/inspect2" \
    && pass "inspect gguf" || fail "inspect gguf"
  sids=$("$BIN/dq-tool" tokenize --model "$SMOL" --text "<|im_start|>user")
  [ "$sids" = "[1,4093]" ] && pass "special tokens parsed: $sids" || fail "special tokens: $sids"
fi
out=$("$BIN/dq-tool" logits --model "$TINY" --ids "$ids" --greedy 3)
grep -q '"greedy":\[' <<<"$out" && pass "logits" || fail "logits: $out"
# The tiny checkpoint is rebuilt from its seed; the model golden was computed on these bytes.
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["file_sha256"])' \
  "$SRC/tests/golden/model/tiny_qwen3.json")
have=$(sha256sum "$TINY/model.safetensors" | cut -d' ' -f1)
[ "$want" = "$have" ] && pass "tiny checkpoint bytes match the golden's" \
  || fail "tiny checkpoint sha256 $have != golden's $want (make-tiny changed: regenerate goldens)"
# fidelity --json with the decode phase's lm_head quantized at load: stdout is the JSON alone
# (the load's log lines go to stderr) and the run records its lm_head.
printf 'The quick brown fox jumps over the lazy dog. It was a sunny day in the park.' >"$TMP/fid.txt"
"$BIN/dq-tool" fidelity --reference "$TINY" --text "$TMP/fid.txt" --tokens 16 --prefix 8 --json \
  --run "q=$TINY,$TINY:weight_only+lm_head=int8" >"$TMP/fid.json" 2>"$TMP/fid.err"
python3 - "$TMP/fid.json" <<'PY' && pass "fidelity --json with +lm_head=int8" || fail "fidelity json: $(head -c 300 "$TMP/fid.json") / $(tail -2 "$TMP/fid.err")"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
assert r["decode"]["lm_head"] == "int8", r["decode"]
assert r["decode_side"]["positions"] > 0 and r["decode_side"]["kl"] > 0, r
PY
expect_error "fidelity +lm_head on the prefill phase" "for the decode phase" \
  "$BIN/dq-tool" fidelity --reference "$TINY" --text "$TMP/fid.txt" --tokens 16 --prefix 8 \
  --run "q=$TINY:weight_only+lm_head=int8"
finish
