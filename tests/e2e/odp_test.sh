#!/usr/bin/env bash
# ODP's start-up checks through the CLI (docs/odp.md): a prefill checkpoint that cannot share the
# decode model's KV cache or tokenizer is refused with a clear error before any device work (so
# this runs without a GPU); `dqserve up` checks the [odp] keys; dq-prefill takes the ODP flags.
source "$(dirname "$0")/lib.sh"
QWEN_TOK=$SRC/tests/golden/tokenizer/qwen-style/tokenizer.json

odp_generate() {  # odp_generate PREFILL_WEIGHTS
  "$BIN/dqserve" generate --device cuda --odp --model "$TINY" --decode-weights "$TINY" \
    --prefill-weights "$1" --prompt hi --max-tokens 1
}

# Another layer count: the streamed prefill could not write the decode model's KV cache.
"$BIN/dq-tool" make-tiny --out "$TMP/three-layers" --seed 2 --layers 3 --tokenizer "$QWEN_TOK" \
  --chat-template "$SRC/tests/golden/chat/qwen3_template.jinja" >/dev/null ||
  fail "make-tiny (3 layers)"
expect_error "prefill checkpoint with another KV layout" \
  "does not fit the decode model: layers 3 \(prefill\) vs 2 \(decode\)" \
  odp_generate "$TMP/three-layers"

# The same shapes and vocabulary size, two token ids swapped: ids would mean other text.
cp -r "$TINY" "$TMP/swapped-tokens"
python3 - "$TMP/swapped-tokens/tokenizer.json" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
v = j["model"]["vocab"]
a, b = [t for t, i in v.items() if i in (300, 301)]
v[a], v[b] = v[b], v[a]
json.dump(j, open(p, "w"))
PY
expect_error "prefill checkpoint with another tokenizer" "tokenizer differs .*token 300" \
  odp_generate "$TMP/swapped-tokens"

expect_error "--odp without a prefill checkpoint" "odp streams --prefill-weights" \
  "$BIN/dqserve" generate --device cuda --odp --model "$TINY" --prompt hi

# dqserve up: the [odp] keys are checked before anything starts (exit 2).
cat >"$TMP/odp.toml" <<EOF2
model = "$TINY"
odp = true
[prefill]
device = "cuda:0"
[decode]
device = "cuda:0"
EOF2
"$BIN/dqserve" up --config "$TMP/odp.toml" >"$TMP/up_out" 2>"$TMP/up_err"
rc=$?
if [ $rc -eq 2 ] && grep -q "set \[prefill\] weights" "$TMP/up_err"; then
  pass "up: odp without prefill weights: $(cat "$TMP/up_err")"
else
  fail "up: odp without prefill weights: rc $rc, $(cat "$TMP/up_err")"
fi

# dq-prefill takes the ODP flags `dqserve up` passes, and refuses them off the GPU.
if [ -x "$BIN/dq-prefill" ]; then
  "$BIN/dq-prefill" --model "$TINY" --weights "$TMP/swapped-tokens" --odp-resident-weights "$TINY" \
    --device cpu --port 1 >"$TMP/pf_out" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q "ODP needs --device cuda" "$TMP/pf_out"; then
    pass "dq-prefill --odp-resident-weights on the CPU: $(grep -o 'ODP needs[^;]*' "$TMP/pf_out" | head -1)"
  else
    fail "dq-prefill --odp-resident-weights on the CPU: rc $rc, $(tail -3 "$TMP/pf_out")"
  fi
fi
finish
