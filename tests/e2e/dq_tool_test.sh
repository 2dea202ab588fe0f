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
finish
