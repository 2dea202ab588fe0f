#!/usr/bin/env bash
# Qwen3.5 from GGUF: the tiny Qwen3.5 written as llama.cpp's converter lays out a `qwen35` GGUF
# file (tests/fixtures/hf_to_gguf.py with gguf-py's own tensor names: ssm_a = -exp(A_log),
# ssm_dt.bias, the conv squeezed to [channels, kernel], 1 + w norms, the value heads of its 2 key
# / 4 value head GDN reordered to llama.cpp's tiled order, ssm.* metadata) and read by dqserve's
# GGUF loader gives the safetensors checkpoint's logits (whose numerics model_golden_test holds
# against transformers) to within float rounding (ssm_a goes back through log), the same
# 24-token greedy continuation (chunked prefill, then recurrent decode steps), the same token
# ids and the same `dqserve generate` text; dq-quantize from it writes the checkpoint it writes
# from the safetensors one. Refusals: an ssm_a that is not negative, a missing ssm.* key.
source "$(dirname "$0")/lib.sh"
QWEN35=$(dirname "$BIN")/tiny-qwen3_5
py=$("$SRC/scripts/test-venv.sh" "$(dirname "$BIN")/venv-e2e") || { fail "test venv"; finish; }
GGUF=$TMP/tiny-qwen3_5.gguf
if "$py" "$SRC/tests/fixtures/hf_to_gguf.py" "$QWEN35" "$GGUF" 2>"$TMP/conv.err"; then
  pass "gguf-py wrote $(du -k "$GGUF" | cut -f1) KiB"
else
  fail "hf_to_gguf.py: $(tail -3 "$TMP/conv.err")"; finish
fi

# 20 prompt ids, 24 greedy steps, the top 50 logits of the prompt's last position.
ids=$(python3 -c 'print([(i * 7919 + 13) % 5000 + 100 for i in range(20)])')
for m in "$QWEN35" "$GGUF"; do
  "$BIN/dq-tool" logits --model "$m" --ids "$ids" --greedy 24 --top 50 --threads 1 \
    >"$TMP/logits-$(basename "$m").json" 2>"$TMP/logits.err" || fail "logits $m: $(cat "$TMP/logits.err")"
done
if python3 - "$TMP/logits-tiny-qwen3_5.json" "$TMP/logits-tiny-qwen3_5.gguf.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(a["top"]) == 50 and len(b["top"]) == 50 and len(a["greedy"]) == 24, a
ta, tb = dict(a["top"]), dict(b["top"])
scale = max(abs(v) for v in ta.values())
common = set(ta) & set(tb)
assert len(common) >= 48, (len(common), a["top"][:3], b["top"][:3])
worst = max(abs(ta[i] - tb[i]) for i in common)
assert worst <= 1e-5 * scale, (worst, scale)
assert [i for i, _ in a["top"][:10]] == [i for i, _ in b["top"][:10]], (a["top"][:10], b["top"][:10])
assert a["greedy"] == b["greedy"], (a["greedy"], b["greedy"])
print(f"max |dlogit| {worst:.2e} of max |logit| {scale:.3f}; greedy {a['greedy'][:8]} ...")
PY
then pass "GGUF logits (top 50) within 1e-5 x max|logit| and 24 greedy tokens equal the safetensors checkpoint's"
else fail "GGUF logits differ from the safetensors path"; fi

text="The quick brown fox, 12345 <|im_start|> héllo wörld!"
a=$("$BIN/dq-tool" tokenize --model "$QWEN35" --text "$text" 2>&1)
b=$("$BIN/dq-tool" tokenize --model "$GGUF" --text "$text" 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "GGUF tokenizer gives the same ids: $a" \
  || fail "tokenize: safetensors $a, GGUF $b"

gen() { "$BIN/dqserve" generate --model "$1" --prompt "Tell me about the moon" --max-tokens 16 \
          --temperature 0 --threads 1 2>"$TMP/gen.err"; }
ga=$(gen "$QWEN35"); gb=$(gen "$GGUF")
[ -n "$ga" ] && [ "$ga" = "$gb" ] && pass "dqserve generate from the GGUF: same text through the chat template" \
  || fail "generate: safetensors '$ga', GGUF '$gb' ($(tail -2 "$TMP/gen.err"))"

# dq-quantize from the GGUF (norms back to w, A_log = log(-ssm_a), the conv unsqueezed, value
# heads back to HF's grouped order, config.json from the metadata): f32 and int4 checkpoints
# whose tensors equal those dq-quantize makes from the safetensors checkpoint
# (tests/e2e/same_checkpoint.py: byte for byte but norms, equal as 1 + w, and A_log, within
# float rounding), with the same logits (to rounding) and greedy tokens.
for spec in "f32" "int4 --group-size 32"; do
  set -- $spec
  fmt=$1; shift
  for src in "$GGUF" "$QWEN35"; do
    "$BIN/dq-quantize" --model "$src" --format "$fmt" --embeddings f32 "$@" \
      --out "$TMP/q-$fmt-$(basename "$src")" >"$TMP/q.log" 2>&1 || fail "dq-quantize $fmt $src: $(tail -2 "$TMP/q.log")"
  done
  qg=$TMP/q-$fmt-tiny-qwen3_5.gguf qh=$TMP/q-$fmt-tiny-qwen3_5
  for m in "$qg" "$qh"; do
    "$BIN/dq-tool" logits --model "$m" --ids "$ids" --greedy 24 --top 50 --threads 1 \
      >"$m.logits.json" 2>"$TMP/logits.err" || fail "logits $m: $(cat "$TMP/logits.err")"
  done
  if out=$("$py" "$SRC/tests/e2e/same_checkpoint.py" "$qg" "$qh" 2>&1) && "$py" - "$qg" "$qh" <<'PY' 2>>"$TMP/cmp.err"
import json, sys
a, b = (json.load(open(d + ".logits.json")) for d in sys.argv[1:3])
ta, tb = dict(a["top"]), dict(b["top"])
scale = max(abs(v) for v in ta.values())
common = set(ta) & set(tb)
assert len(common) >= 48 and max(abs(ta[i] - tb[i]) for i in common) <= 1e-5 * scale
assert a["greedy"] == b["greedy"], (a["greedy"], b["greedy"])
PY
  then pass "dq-quantize $fmt from the GGUF: $out; same logits (1e-5) and 24 greedy tokens"
  else fail "dq-quantize $fmt from the GGUF: $out $(tail -2 "$TMP/cmp.err")"; fi
done

# Refusals, each a copy of the GGUF changed in one place by gguf-py.
variant() {  # variant NAME EDIT: a copy of the GGUF, edited (tests/e2e/gguf_variant.py)
  "$py" "$SRC/tests/e2e/gguf_variant.py" "$GGUF" "$TMP/$1.gguf" qwen35 "$2"
}
ids1='[5,6,7]'
variant posa 'tensors["blk.1.ssm_a"][0] = 0.5' &&
  expect_error "an ssm_a that is not -exp(A_log) refused" "blk.1.ssm_a holds 0.5" \
    "$BIN/dq-tool" logits --model "$TMP/posa.gguf" --ids "$ids1"
variant nogroups 'drop qwen35.ssm.group_count' &&
  expect_error "missing ssm.group_count refused" "qwen35.ssm.group_count" \
    "$BIN/dq-tool" logits --model "$TMP/nogroups.gguf" --ids "$ids1"
finish
