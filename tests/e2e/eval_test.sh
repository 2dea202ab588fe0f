#!/usr/bin/env bash
# dq-eval (eval/) against `dqserve up` on SmolLM2: a run of ruler-niah + arith writes its report;
# killing the server mid-run and rerunning resumes without redoing finished items; bad input
# (unknown task, unreachable endpoint, malformed task file) gives one clear error and exit 1.
source "$(dirname "$0")/lib.sh"
EVAL=$SRC/eval/dq-eval
[ -f "$SMOL" ] || { echo "FAIL: $SMOL missing (scripts/setup.sh fetches it)"; exit 1; }

# free_port: a free port below the kernel's ephemeral range.
# shellcheck source=eval/lib.sh
source "$SRC/eval/lib.sh"
# Requests the router answered (every outcome), from its /metrics.
requests() { python3 -c '
import sys, urllib.request
t = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
print(int(sum(float(l.split()[-1]) for l in t.splitlines() if l.startswith("dq_requests_total"))))' "$1"; }
lines() { if [ -f "$1" ]; then grep -c . "$1"; else echo 0; fi; }

# --- bad input: no server needed ----------------------------------------------------------
dead=$(free_port)
expect_error "unknown task" 'unknown task "nope"' \
  "$EVAL" run --endpoint "http://127.0.0.1:$dead" --tasks arith,nope --out "$TMP/bad" -q
expect_error "unreachable endpoint" "cannot reach the endpoint" \
  "$EVAL" run --endpoint "http://127.0.0.1:$dead" --tasks arith --out "$TMP/bad" -q
printf '{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?", "answer": \n' >"$TMP/bad.jsonl"
expect_error "malformed task file" "bad.jsonl:2: malformed JSON line" \
  "$EVAL" run --endpoint "http://127.0.0.1:$dead" --tasks gsm8k --data "gsm8k=$TMP/bad.jsonl" \
  --out "$TMP/bad" -q
expect_error "file task without --data" "give --data gsm8k=PATH" \
  "$EVAL" run --endpoint "http://127.0.0.1:$dead" --tasks gsm8k --out "$TMP/bad" -q
expect_error "usage" "required" "$EVAL" run --tasks arith
"$EVAL" list-tasks >"$TMP/tasks.txt" 2>&1
if grep -q "^ruler-niah " "$TMP/tasks.txt" && "$EVAL" list-tasks | head -1 >/dev/null; then
  pass "list-tasks"; else fail "list-tasks: $(cat "$TMP/tasks.txt")"; fi

# --- a real deployment --------------------------------------------------------------------
UP_PID=""
start_up() {  # start_up NAME: dqserve up on free ports, threads = 1; sets PORT and UP_PID
  PORT=$(free_port)
  cat >"$TMP/$1.toml" <<TOML
model = "$SMOL"
[router]
port = $PORT
[prefill]
threads = 1
[decode]
threads = 1
lease_ttl_ms = 600000
TOML
  "$BIN/dqserve" up --config "$TMP/$1.toml" >"$TMP/$1.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 600); do
    grep -q "dqserve: serving" "$TMP/$1.log" && return 0
    kill -0 "$UP_PID" 2>/dev/null || break
    sleep 0.2
  done
  echo "dqserve up did not start:"; cat "$TMP/$1.log"; exit 1
}
stop_up() { [ -n "$UP_PID" ] && kill -TERM "$UP_PID" 2>/dev/null && wait "$UP_PID"; UP_PID=""; }
trap 'stop_up; rm -rf "$TMP"' EXIT

OUT=$TMP/run
RUN=(run --tasks ruler-niah,arith --limit 4 --concurrency 2 --out "$OUT" --retries 2
     --backoff 0.2 --label smollm2-q4_1)

# 1. Start a run and kill the server once two items are finished.
start_up up1
"$EVAL" "${RUN[@]}" --endpoint "http://127.0.0.1:$PORT" >"$TMP/eval1.out" 2>"$TMP/eval1.err" &
EVAL_PID=$!
for _ in $(seq 1500); do
  [ "$(lines "$OUT/results.jsonl")" -ge 2 ] && break
  kill -0 "$EVAL_PID" 2>/dev/null || break
  sleep 0.2
done
stop_up
wait "$EVAL_PID"; rc=$?
done1=$(lines "$OUT/results.jsonl")
if [ "$rc" -eq 1 ] && grep -q "rerun the same command to resume" "$TMP/eval1.err" &&
   [ "$done1" -ge 2 ] && [ "$done1" -lt 8 ]; then
  pass "server killed mid-run: dq-eval exits 1 with $done1 of 8 items saved"
else
  fail "killed run: rc=$rc, $done1 items; stderr: $(tail -5 "$TMP/eval1.err")"
fi
head -n "$done1" "$OUT/results.jsonl" >"$TMP/before.jsonl"

# 2. Restart (other ports) and rerun the same command: only the missing items are sent.
start_up up2
"$EVAL" "${RUN[@]}" --endpoint "http://127.0.0.1:$PORT" >"$TMP/eval2.out" 2>"$TMP/eval2.err"; rc=$?
sent=$(requests "$PORT")
keys=$(python3 -c 'import json,sys; k=[json.loads(l)["key"] for l in open(sys.argv[1])]; print(len(k), len(set(k)))' "$OUT/results.jsonl")
if [ "$rc" -eq 0 ] && grep -q "resuming: $done1 of 8 items already done" "$TMP/eval2.err" &&
   [ "$sent" -eq $((8 - done1)) ] && [ "$keys" = "8 8" ] &&
   [ "$(head -n "$done1" "$OUT/results.jsonl")" = "$(cat "$TMP/before.jsonl")" ]; then
  pass "resumed: $done1 items kept, $sent requests sent for the other $((8 - done1))"
else
  fail "resume: rc=$rc sent=$sent keys='$keys'; stderr: $(tail -5 "$TMP/eval2.err")"
fi

# 3. The report.
for f in report.md report.json score_vs_bpw.png manifest.json results.jsonl; do
  [ -s "$OUT/$f" ] && pass "$f written" || fail "$f missing"
done
if head -c 8 "$OUT/score_vs_bpw.png" | od -An -c | grep -q "P   N   G"; then pass "PNG signature"
else fail "score_vs_bpw.png is not a PNG"; fi
python3 - "$OUT" <<'PY' && pass "report and manifest contents" || fail "report/manifest contents"
import json, os, sys
out = sys.argv[1]
man = json.load(open(os.path.join(out, "manifest.json")))
assert man["prefill_format"] == man["decode_format"] == "q4_1:weight_only", man
assert man["bits_per_weight"] == {"prefill": 5.0, "decode": 5.0}, man["bits_per_weight"]
assert man["commit"] and man["model"], man
assert [i["status"] for i in man["invocations"]] == ["aborted", "complete"], man["invocations"]
rep = json.load(open(os.path.join(out, "report.json")))["deployments"][0]
assert rep["families"]["decode-heavy"]["n"] == 4 and rep["families"]["prefill-heavy"]["n"] == 4
assert rep["weight_memory_bytes"] > 2 * 90e6, rep["weight_memory_bytes"]
assert rep["speed"]["decode_tok_s"] > 0 and rep["speed"]["prefill_tok_s"] > 0, rep["speed"]
pts = rep["tasks"]["ruler-niah"]["prompt_tokens_mean"]
assert 700 < pts < 1400, pts  # ~1K tokens asked for, measured by usage.prompt_tokens
md = open(os.path.join(out, "report.md")).read()
assert "| smollm2-q4_1 | q4_1 | q4_1 |" in md, md
assert "(n=4)" in md, md
for l in open(os.path.join(out, "results.jsonl")):
    r = json.loads(l)
    assert 0.0 <= r["score"] <= 1.0 and (r.get("prompt_tokens") or 0) > 0 and not r.get("error"), r
print(md)
PY

# 4. Everything done: a third run sends nothing.
"$EVAL" "${RUN[@]}" --endpoint "http://127.0.0.1:$PORT" -q >/dev/null 2>"$TMP/eval3.err"; rc=$?
sent2=$(requests "$PORT")
if [ "$rc" -eq 0 ] && [ "$sent2" -eq "$sent" ] && grep -q "resuming: 8 of 8" "$TMP/eval3.err"; then
  pass "finished run: rerun sends no request"
else fail "rerun of a finished run: rc=$rc, requests $sent -> $sent2"; fi
stop_up
finish
