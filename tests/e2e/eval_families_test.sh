#!/usr/bin/env bash
# dq-tool fidelity and dq-eval on the Qwen3.5 and Gemma 3 families (tiny random models).
# dq-tool fidelity, both families: checkpoints from dq-quantize (f32 copy, int8, int4, fp8 w8a8,
# nvfp4 w4a4 calibrated, and nvfp4 format disaggregation) against the f32 source: the f32 copy
# has KL ~0 (< 1e-9) and full agreement, every format a finite positive KL, int4 more than int8.
# dq-eval, both families: the f32 model and its int4 checkpoint, each behind `dqserve up` on the
# CPU (Qwen3.5's recurrent state crossing PD in its state slots): a run of arith +
# ruler-niah-single scores every item (real prompt lengths, no errors) and its manifest names
# the formats; dq-eval fidelity of int4 against f32 reports KL > 0 and < 100 % agreement.
source "$(dirname "$0")/lib.sh"
source "$SRC/eval/lib.sh"
EVAL=$SRC/eval/dq-eval
CAL=$SRC/tests/data/calib_text.txt
TEXT=$SRC/tests/data/fidelity_text.txt

# --- dq-tool fidelity on both families ----------------------------------------------------
for fam in qwen3_5 gemma3; do
  src=$(dirname "$BIN")/tiny-$fam
  ok=1
  for spec in "f32 f32" "int8 int8 --group-size 32" "int4 int4 --group-size 32" "fp8 fp8" \
              "nvfp4 nvfp4 --calib $CAL"; do
    set -- $spec
    name=$1 fmt=$2; shift 2
    "$BIN/dq-quantize" --model "$src" --format "$fmt" --embeddings f32 --out "$TMP/$fam-$name" \
      "$@" >"$TMP/q.log" 2>&1 || { fail "$fam: quantize $name: $(tail -3 "$TMP/q.log")"; ok=0; }
  done
  [ "$ok" = 1 ] || continue
  q=$TMP/$fam
  if "$BIN/dq-tool" fidelity --reference "$src" --text "$TEXT" --tokens 96 --prefix 48 --json \
       --run "f32=$q-f32" --run "int8=$q-int8" --run "int4=$q-int4" --run "fp8-w8a8=$q-fp8:w8a8" \
       --run "nvfp4-w4a4=$q-nvfp4:w4a4" --run "nvfp4-fmt-disagg=$q-nvfp4:w4a4,$q-nvfp4" \
       >"$TMP/fid-$fam.json" 2>"$TMP/fid.err" &&
     python3 - "$TMP/fid-$fam.json" <<'PY'
import json, math, sys
runs = {r["label"]: r for r in json.load(open(sys.argv[1]))["runs"]}
for phase in ("prefill_side", "decode_side"):
    f32 = runs["f32"][phase]
    assert f32["positions"] > 0 and f32["kl"] < 1e-9 and f32["top1_agreement"] == 1.0, f32
    for label in ("int8", "int4", "fp8-w8a8", "nvfp4-w4a4", "nvfp4-fmt-disagg"):
        r = runs[label][phase]
        assert r["positions"] == f32["positions"] and math.isfinite(r["kl"]) and r["kl"] > 0, r
    assert runs["int4"][phase]["kl"] > runs["int8"][phase]["kl"], runs
print({l: round(r["all"]["kl"], 4) for l, r in runs.items()})
PY
  then pass "$fam: dq-tool fidelity of 6 quantized runs against the f32 source"
  else fail "$fam: dq-tool fidelity: $(tail -3 "$TMP/fid.err")"; fi
done

# --- dq-eval on both families behind dqserve up -------------------------------------------------
PIDS=()
start_up() {  # start_up NAME MODEL: dqserve up on a free port; prints the port
  local port; port=$(free_port)
  cat >"$TMP/$1.toml" <<TOML
model = "$2"
[router]
port = $port
[prefill]
threads = 1
[decode]
threads = 1
TOML
  "$BIN/dqserve" up --config "$TMP/$1.toml" >"$TMP/$1.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 600); do
    grep -q "dqserve: serving" "$TMP/$1.log" && { echo "$port"; return 0; }
    kill -0 "${PIDS[-1]}" 2>/dev/null || break
    sleep 0.2
  done
  echo "dqserve up ($1) did not start: $(tail -5 "$TMP/$1.log")" >&2
  return 1
}
stop_all() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p"; done; PIDS=(); }
trap 'stop_all; rm -rf "$TMP"' EXIT

for fam in gemma3 qwen3_5; do
  src=$(dirname "$BIN")/tiny-$fam
  [ -d "$TMP/$fam-int4" ] || { fail "no int4 $fam checkpoint (quantize failed above)"; continue; }
  if ref_port=$(start_up "$fam-ref" "$src") && int4_port=$(start_up "$fam-int4" "$TMP/$fam-int4"); then
    pass "dqserve up serves the f32 and int4 $fam"
    for d in "ref $ref_port f32" "int4 $int4_port int4"; do
      set -- $d
      "$EVAL" run --endpoint "http://127.0.0.1:$2" --tasks arith,ruler-niah-single --limit 2 \
        --length 256 --max-tokens 48 --concurrency 2 --out "$TMP/eval-$fam-$1" --label "$fam-$1" \
        -q >"$TMP/eval.out" 2>"$TMP/eval.err"; rc=$?
      if [ "$rc" -eq 0 ] && python3 - "$TMP/eval-$fam-$1" "$3" <<'PY'
import json, os, sys
out, fmt = sys.argv[1], sys.argv[2]
man = json.load(open(os.path.join(out, "manifest.json")))
assert man["decode_format"].split(":")[0].split("-")[0] == fmt, man["decode_format"]
items = [json.loads(l) for l in open(os.path.join(out, "results.jsonl"))]
assert len(items) == 4, len(items)
for r in items:
    assert 0.0 <= r["score"] <= 1.0 and (r.get("prompt_tokens") or 0) > 0 and not r.get("error"), r
assert max(r["prompt_tokens"] for r in items if r["task"].startswith("ruler")) > 150, items
assert os.path.getsize(os.path.join(out, "report.md")) > 0
PY
      then pass "dq-eval run on $fam $1 ($3): 4 items scored, report written"
      else fail "dq-eval run on $fam $1: rc=$rc $(tail -3 "$TMP/eval.err")"; fi
    done
    "$EVAL" fidelity --endpoint "http://127.0.0.1:$int4_port" \
      --reference "http://127.0.0.1:$ref_port" --out "$TMP/fid-eval-$fam" --windows 3 \
      >"$TMP/fe.out" 2>"$TMP/fe.err"; rc=$?
    if [ "$rc" -eq 0 ] && python3 - "$TMP/fid-eval-$fam" <<'PY'
import json, math, sys
s = json.load(open(sys.argv[1] + "/fidelity.json"))["summary"]
assert s["windows"] == 3 and s["positions"] > 0, s
assert math.isfinite(s["kl"]) and s["kl"] > 0 and s["top1"] < 1.0, s
print(f"KL {s['kl']:.4f}, top-1 {100 * s['top1']:.1f} %, {s['positions']} positions")
PY
    then pass "dq-eval fidelity of int4 against f32 $fam"
    else fail "dq-eval fidelity ($fam): rc=$rc $(tail -3 "$TMP/fe.err")"; fi
    # The reference against itself: the same served logits, so KL 0 and full agreement.
    "$EVAL" fidelity --endpoint "http://127.0.0.1:$ref_port" \
      --reference "http://127.0.0.1:$ref_port" --out "$TMP/fid-self-$fam" --windows 2 \
      >"$TMP/fe.out" 2>"$TMP/fe.err"; rc=$?
    if [ "$rc" -eq 0 ] && python3 - "$TMP/fid-self-$fam" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/fidelity.json"))["summary"]
assert s["windows"] == 2 and s["positions"] > 0 and s["kl"] < 1e-6 and s["top1"] == 1.0, s
PY
    then pass "dq-eval fidelity of the f32 $fam against itself: KL ~0, full agreement"
    else fail "dq-eval self-fidelity ($fam): rc=$rc $(tail -3 "$TMP/fe.err")"; fi
  else
    fail "dqserve up with $fam"
  fi
  stop_all
done
stop_all
finish
