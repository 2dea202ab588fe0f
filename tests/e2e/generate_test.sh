#!/usr/bin/env bash
# dqserve generate on the real default model, and its errors on bad input.
source "$(dirname "$0")/lib.sh"

if [ -f "$SMOL" ]; then
  out=$("$BIN/dqserve" generate --model "$SMOL" --prompt "What is the capital of France?" \
        --max-tokens 32 2>"$TMP/stderr")
  rc=$?
  if [ $rc -eq 0 ] && grep -q "Paris" <<<"$out"; then pass "capital of France: $out"
  else fail "capital of France (rc $rc): $out / $(cat "$TMP/stderr")"; fi
  grep -qE 'decode [0-9.]+ tok/s' "$TMP/stderr" && pass "tok/s on stderr" || fail "no tok/s line"
else
  fail "default model missing at $SMOL (scripts/setup.sh fetches it)"
fi

# The lm_head quantized at load: int8 keeps the answer, and a format not on the list is refused.
if [ -f "$SMOL" ]; then
  out=$("$BIN/dqserve" generate --model "$SMOL" --prompt "What is the capital of France?" \
        --max-tokens 32 --lm-head int8 2>"$TMP/lm_err")
  if grep -q "Paris" <<<"$out" && grep -q "lm_head: int8, quantized at load" "$TMP/lm_err"
  then pass "int8 lm_head: $out"
  else fail "int8 lm_head: $out / $(tail -3 "$TMP/lm_err")"; fi
fi
"$BIN/dqserve" generate --model "$TINY" --prompt hi --lm-head int5 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -ne 0 ] && grep -q "int5 not in" "$TMP/err" && pass "bad --lm-head refused (rc $rc)" \
  || fail "bad --lm-head (rc $rc): $(cat "$TMP/err")"

# Interactive: two turns from stdin, then EOF.
printf 'Say hi\nSay bye\n' | "$BIN/dqserve" generate --model "$TINY" -i --max-tokens 4 \
  >"$TMP/chat" 2>"$TMP/chat_err" && [ "$(grep -o 'prompt tokens in' "$TMP/chat_err" | wc -l)" -eq 2 ] \
  && pass "interactive two turns" || fail "interactive: $(cat "$TMP/chat_err")"

expect_error "missing model" "does not exist" \
  "$BIN/dqserve" generate --model "$TMP/nope.gguf" --prompt hi
head -c 1000 "$SMOL" >"$TMP/truncated.gguf" 2>/dev/null || printf 'GGUF\3\0\0\0' >"$TMP/truncated.gguf"
expect_error "truncated gguf" "gguf|truncat|past the end|end of file" \
  "$BIN/dqserve" generate --model "$TMP/truncated.gguf" --prompt hi
head -c 4096 /dev/urandom >"$TMP/garbage.gguf"
expect_error "garbage file" "gguf|magic|safetensors|not a" \
  "$BIN/dqserve" generate --model "$TMP/garbage.gguf" --prompt hi
cp -r "$TINY" "$TMP/mamba"
sed -i 's/"qwen3"/"mamba"/; s/Qwen3ForCausalLM/MambaForCausalLM/' "$TMP/mamba/config.json"
expect_error "unknown architecture" "unknown model architecture 'mamba'.*supports" \
  "$BIN/dqserve" generate --model "$TMP/mamba" --prompt hi
cp -r "$TINY" "$TMP/cut"
truncate -s 100000 "$TMP/cut/model.safetensors"
expect_error "truncated safetensors" "safetensors|truncat|past|end of file|bytes" \
  "$BIN/dqserve" generate --model "$TMP/cut" --prompt hi
long=$(python3 -c 'print(" ".join(["word"] * 5000))')
expect_error "prompt longer than context" "context" \
  "$BIN/dqserve" generate --model "$TINY" --prompt "$long"
expect_error "no prompt" "prompt" "$BIN/dqserve" generate --model "$TINY"

# Speculative decoding with the self drafter: the same greedy text, acceptance on stderr.
if [ -f "$SMOL" ]; then
  q="Name three primary colors."
  plain=$("$BIN/dqserve" generate --model "$SMOL" --prompt "$q" --max-tokens 24 2>/dev/null)
  spec=$("$BIN/dqserve" generate --model "$SMOL" --prompt "$q" --max-tokens 24 \
         --speculative self --draft-format int8 --draft-group-size 64 2>"$TMP/spec_err")
  if [ -n "$plain" ] && [ "$plain" = "$spec" ] && grep -q "speculative self: .* accepted" "$TMP/spec_err"
  then pass "self drafter: same text as plain"
  else fail "self drafter: '$spec' vs plain '$plain' / $(cat "$TMP/spec_err")"; fi
  expect_error "drafter with another tokenizer" "tokenizer" \
    "$BIN/dqserve" generate --model "$SMOL" --prompt hi --speculative self --draft-weights "$TINY"
fi
"$BIN/dqserve" generate --model "$TINY" --prompt hi --speculative self 2>"$TMP/err" >/dev/null
rc=$?
[ $rc -eq 2 ] && grep -q "needs exactly one of --draft-format" "$TMP/err" \
  && pass "self drafter without weights: $(cat "$TMP/err")" \
  || fail "self drafter without weights (rc $rc): $(cat "$TMP/err")"
finish
