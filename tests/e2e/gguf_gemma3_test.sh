#!/usr/bin/env bash
# Gemma 3 from GGUF: the tiny Gemma 3 written as llama.cpp lays out a `gemma3` GGUF file
# (tests/fixtures/hf_to_gguf.py with gguf-py from PyPI, in the e2e venv: llama.cpp's names,
# norms stored as 1 + w, the window and RoPE base in metadata, a gpt2 tokenizer) and read by
# dqserve's GGUF loader gives exactly the safetensors checkpoint's logits (whose numerics
# model_golden_test holds against transformers), the same greedy continuation past the window,
# the same token ids and the same `dqserve generate` text. Refusals: softcapping, an unknown
# RoPE scaling, a missing window. dq-quantize from the GGUF (f32, int4) writes the checkpoint it
# writes from the safetensors one (norms to rounding).
source "$(dirname "$0")/lib.sh"
GEMMA3=$(dirname "$BIN")/tiny-gemma3
py=$("$SRC/scripts/test-venv.sh" "$(dirname "$BIN")/venv-e2e") || { fail "test venv"; finish; }
GGUF=$TMP/tiny-gemma3.gguf
if "$py" "$SRC/tests/fixtures/hf_to_gguf.py" "$GEMMA3" "$GGUF" 2>"$TMP/conv.err"; then
  pass "gguf-py wrote $(du -k "$GGUF" | cut -f1) KiB"
else
  fail "hf_to_gguf.py: $(tail -3 "$TMP/conv.err")"; finish
fi

# 20 prompt ids (past the window of 8), 24 greedy steps, the top 50 logits of the prompt.
ids=$(python3 -c 'print([(i * 7919 + 13) % 5000 + 100 for i in range(20)])')
for m in "$GEMMA3" "$GGUF"; do
  "$BIN/dq-tool" logits --model "$m" --ids "$ids" --greedy 24 --top 50 --threads 1 \
    >"$TMP/logits-$(basename "$m").json" 2>"$TMP/logits.err" || fail "logits $m: $(cat "$TMP/logits.err")"
done
if python3 - "$TMP/logits-tiny-gemma3.json" "$TMP/logits-tiny-gemma3.gguf.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(a["top"]) == 50 and len(a["greedy"]) == 24, a
assert a["top"] == b["top"], (a["top"][:3], b["top"][:3])
assert a["greedy"] == b["greedy"], (a["greedy"], b["greedy"])
print("top logit", a["top"][0], "greedy", a["greedy"][:8], "...")
PY
then pass "GGUF logits (top 50) and 24 greedy tokens equal the safetensors checkpoint's exactly"
else fail "GGUF logits differ from the safetensors path"; fi

text="The quick brown fox, 12345 <|im_start|> héllo wörld!"
a=$("$BIN/dq-tool" tokenize --model "$GEMMA3" --text "$text" 2>&1)
b=$("$BIN/dq-tool" tokenize --model "$GGUF" --text "$text" 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "GGUF tokenizer gives the same ids: $a" \
  || fail "tokenize: safetensors $a, GGUF $b"

gen() { "$BIN/dqserve" generate --model "$1" --prompt "Tell me about the moon" --max-tokens 16 \
          --temperature 0 --threads 1 2>/dev/null; }
ga=$(gen "$GEMMA3"); gb=$(gen "$GGUF")
[ -n "$ga" ] && [ "$ga" = "$gb" ] && pass "dqserve generate: same text through the chat template" \
  || fail "generate: safetensors '$ga', GGUF '$gb'"

# Refusals, each a GGUF the fixture writer changes in one place.
variant() {  # variant NAME EDIT: a copy of the GGUF, edited (tests/e2e/gguf_variant.py)
  "$py" "$SRC/tests/e2e/gguf_variant.py" "$GGUF" "$TMP/$1.gguf" gemma3 "$2"
}
ids1='[5,6,7]'
variant softcap 'w.add_float32("gemma3.final_logit_softcapping", 30.0)' &&
  expect_error "softcapping refused" "final_logit_softcapping is not supported" \
    "$BIN/dq-tool" logits --model "$TMP/softcap.gguf" --ids "$ids1"
variant yarn 'w.add_string("gemma3.rope.scaling.type", "yarn")' &&
  expect_error "yarn RoPE scaling refused" "rope.scaling.type 'yarn' is not supported" \
    "$BIN/dq-tool" logits --model "$TMP/yarn.gguf" --ids "$ids1"
variant nowindow 'drop gemma3.attention.sliding_window' &&
  expect_error "missing window refused" "gemma3.attention.sliding_window" \
    "$BIN/dq-tool" logits --model "$TMP/nowindow.gguf" --ids "$ids1"

# dq-quantize from the GGUF (norms back to HF's w, config.json from the metadata): f32 and int4
# checkpoints with the tensors dq-quantize makes from the safetensors checkpoint
# (tests/e2e/same_checkpoint.py: byte for byte but the norms, fl(1 + w) - 1 against w, equal as
# the 1 + w a model multiplies by), and exactly the same logits and greedy tokens.
for spec in "f32" "int4 --group-size 32"; do
  set -- $spec
  fmt=$1; shift
  for src in "$GGUF" "$GEMMA3"; do
    "$BIN/dq-quantize" --model "$src" --format "$fmt" --embeddings f32 "$@" \
      --out "$TMP/q-$fmt-$(basename "$src")" >"$TMP/q.log" 2>&1 || fail "dq-quantize $fmt $src: $(tail -2 "$TMP/q.log")"
  done
  qg=$TMP/q-$fmt-tiny-gemma3.gguf qh=$TMP/q-$fmt-tiny-gemma3
  out=$("$py" "$SRC/tests/e2e/same_checkpoint.py" "$qg" "$qh" 2>&1) &&
    pass "dq-quantize $fmt from the GGUF, against the one from safetensors: $out" ||
    fail "dq-quantize $fmt: checkpoints from the GGUF and from safetensors differ: $out"
  for m in "$qg" "$qh"; do
    "$BIN/dq-tool" logits --model "$m" --ids "$ids" --greedy 24 --top 50 --threads 1 \
      >"$m.logits.json" 2>"$TMP/logits.err" || fail "logits $m: $(cat "$TMP/logits.err")"
  done
  python3 - "$qg.logits.json" "$qh.logits.json" <<'PY' &&
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(a["top"]) == 50 and a["top"] == b["top"] and a["greedy"] == b["greedy"], (a, b)
PY
    pass "dq-quantize $fmt from the GGUF: its config.json loads, same logits and 24 greedy tokens" ||
    fail "dq-quantize $fmt from the GGUF: logits differ"
done
finish
