#!/usr/bin/env bash
# dq-bench serve (bench/) against `dqserve up` on SmolLM2: 8 streamed requests at concurrency 2
# (64 prompt tokens, 16 generated) give 8 successes whose TTFT, TPOT, token counts, percentiles
# and /metrics deltas add up; a concurrency sweep, fixed-rate arrivals, a timed run, 429s counted
# as rejected, Ctrl-C keeping the partial results; bad input gives one error line and exit 1.
# The pure parts have their own ctest entry (bench_serve_unit_test.sh).
source "$(dirname "$0")/lib.sh"
BENCH=$SRC/bench/dq-bench
CHECK=$SRC/tests/e2e/bench/check_results.py
[ -f "$SMOL" ] || { echo "FAIL: $SMOL missing (scripts/setup.sh fetches it)"; exit 1; }

# free_port: a free port below the kernel's ephemeral range.
# shellcheck source=eval/lib.sh
source "$SRC/eval/lib.sh"
metric() {  # metric NAME: a sample of the router's /metrics ("name{labels}" verbatim)
  python3 -c '
import sys, urllib.request
t = urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10).read().decode()
print(next((l.rsplit(" ", 1)[1] for l in t.splitlines() if l.rsplit(" ", 1)[0] == sys.argv[2]),
           "none"))' "$EP" "$1" 2>/dev/null || echo none
}
checked() {  # checked NAME CHECK ARGS...: the results checks of check_results.py
  local name=$1; shift
  if ! python3 "$CHECK" "$@"; then fail "$name: results checks (above)"; fi
}

# --- bad input: no server needed ----------------------------------------------------------
dead=$(free_port)
expect_error "unreachable endpoint" "cannot reach the endpoint http://127.0.0.1:$dead" \
  "$BENCH" serve --endpoint "http://127.0.0.1:$dead" --concurrency 2 --num-requests 8
expect_error "zero concurrency" "concurrency: want a positive integer" \
  "$BENCH" serve --endpoint "http://127.0.0.1:$dead" --concurrency 0
expect_error "no load given" "one of the arguments --concurrency --rate --sweep-concurrency" \
  "$BENCH" serve --endpoint "http://127.0.0.1:$dead"
expect_error "bad length distribution" 'uniform:LO,HI' \
  "$BENCH" serve --endpoint "http://127.0.0.1:$dead" --concurrency 1 --input-len-dist uniform:9
expect_error "unknown subcommand" "invalid choice" "$BENCH" bogus

# --- a real deployment --------------------------------------------------------------------
PORT=$(free_port)
# max_in_flight 2 + max_queue 2: concurrency 2 is always admitted, 6 users get 429s.
cat >"$TMP/up.toml" <<TOML
model = "$SMOL"
[router]
port = $PORT
max_in_flight = 2
max_queue = 2
[prefill]
threads = 1
[decode]
threads = 1
TOML
"$BIN/dqserve" up --config "$TMP/up.toml" >"$TMP/up.log" 2>&1 &
UP_PID=$!
trap 'kill -TERM "$UP_PID" 2>/dev/null; wait "$UP_PID" 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 600); do
  grep -q "dqserve: serving" "$TMP/up.log" && break
  kill -0 "$UP_PID" 2>/dev/null || break
  sleep 0.2
done
grep -q "dqserve: serving" "$TMP/up.log" || { echo "FAIL: dqserve up did not start:"; cat "$TMP/up.log"; exit 1; }
EP=http://127.0.0.1:$PORT

# 1. The run of the issue: 8 requests at concurrency 2, 64 tokens in, 16 out.
"$BENCH" serve --endpoint "$EP" --concurrency 2 --num-requests 8 --input-len 64 \
  --output-len 16 --slo-ttft-ms 2000 --slo-tpot-ms 500 --out "$TMP/main.json" \
  >"$TMP/main.out" 2>"$TMP/main.err"
rc=$?
cat "$TMP/main.out"
if [ "$rc" -ne 0 ]; then fail "main run: exit $rc: $(cat "$TMP/main.err")"
else
  pass "main run: exit 0"
  checked "main run" main "$TMP/main.json" 8 64 16
  if grep -qE '^TTFT +[0-9]' "$TMP/main.out" && grep -q "8 / 0 / 0" "$TMP/main.out" &&
     grep -q "Goodput" "$TMP/main.out"; then pass "summary table on stdout"
  else fail "summary table: $(cat "$TMP/main.out")"; fi
  if grep -q "8/8 100% .*ETA" "$TMP/main.err"; then pass "progress line with ETA on stderr"
  else fail "no progress line: $(cat "$TMP/main.err")"; fi
  if [ -f "$TMP/main.md" ] && grep -q "| concurrency 2 | 8 / 0 / 0 |" "$TMP/main.md"; then
    pass "Markdown summary beside the JSON"; else fail "main.md: $(cat "$TMP/main.md")"; fi
fi

# 2. A sweep over concurrency (chat API): one JSON, one Markdown table.
"$BENCH" serve --endpoint "$EP" --sweep-concurrency 1,2 --num-requests 3 --chat \
  --input-len 48 --output-len 6 --out "$TMP/sweep.json" -q >"$TMP/sweep.out" 2>"$TMP/sweep.err"
rc=$?
if [ "$rc" -ne 0 ]; then fail "sweep: exit $rc: $(cat "$TMP/sweep.err")"
else
  checked "sweep" sweep "$TMP/sweep.json" 1,2
  if grep -q "| concurrency 1 |" "$TMP/sweep.md" && grep -q "| concurrency 2 |" "$TMP/sweep.md" \
     && grep -q "| concurrency 2 |" "$TMP/sweep.out"; then pass "sweep table: $(grep -c '| concurrency' "$TMP/sweep.md") rows"
  else fail "sweep table: $(cat "$TMP/sweep.md")"; fi
fi

# 3. Open loop, fixed gaps: requests leave every 0.25 s whatever the answers.
if "$BENCH" serve --endpoint "$EP" --rate 4 --arrivals fixed --num-requests 4 --input-len 16 \
    --output-len 4 --out "$TMP/rate.json" -q >/dev/null 2>"$TMP/rate.err"; then
  checked "rate" rate "$TMP/rate.json" 4.0 4
else fail "rate run: $(cat "$TMP/rate.err")"; fi

# 4. A timed run.
if "$BENCH" serve --endpoint "$EP" --concurrency 1 --duration 1.5 --input-len 16 \
    --output-len 4 --out "$TMP/duration.json" -q >/dev/null 2>"$TMP/duration.err"; then
  checked "duration" duration "$TMP/duration.json" 1.5
else fail "duration run: $(cat "$TMP/duration.err")"; fi

# 5. Six users against 2 running + 2 queued: the rest get 429 + Retry-After, counted apart.
"$BENCH" serve --endpoint "$EP" --concurrency 6 --num-requests 8 --input-len 32 \
  --output-len 8 --no-retry-wait --out "$TMP/rejected.json" -q >/dev/null 2>"$TMP/rejected.err"
rc=$?
if [ "$rc" -ne 0 ]; then fail "overload run: exit $rc: $(cat "$TMP/rejected.err")"
else
  checked "overload" rejected "$TMP/rejected.json" 8
  if grep -q "rejected with 429" "$TMP/rejected.err"; then pass "overload: warning on stderr"
  else fail "overload: no warning: $(cat "$TMP/rejected.err")"; fi
fi

# 6. Ctrl-C mid-run: the partial summary is printed and written, exit 130, nothing left running.
# (--no-calibrate: its 1-token requests would count as finished requests in the wait below)
"$BENCH" serve --endpoint "$EP" --concurrency 2 --num-requests 200 --input-len 16 \
  --output-len 24 --no-calibrate --out "$TMP/int.json" >"$TMP/int.out" 2>"$TMP/int.err" &
BENCH_PID=$!
base=$(metric 'dq_requests_total{outcome="length"}'); base=${base%.*}
for _ in $(seq 300); do  # until a first request finished (server side)
  n=$(metric 'dq_requests_total{outcome="length"}')
  [ "$n" != none ] && [ "${n%.*}" -gt "$base" ] && break
  sleep 0.1
done
sleep 1.5
kill -INT "$BENCH_PID"
wait "$BENCH_PID"
rc=$?
if [ "$rc" -ne 130 ]; then fail "Ctrl-C: exit $rc (want 130): $(tail -3 "$TMP/int.err")"
else
  pass "Ctrl-C: exit 130"
  checked "Ctrl-C" interrupted "$TMP/int.json"
  if grep -qE '^TTFT +[0-9]' "$TMP/int.out" && grep -q "^error: interrupted" "$TMP/int.err"
  then pass "Ctrl-C: partial summary printed"; else fail "Ctrl-C: $(cat "$TMP/int.out" "$TMP/int.err")"; fi
fi
running=""
for _ in $(seq 50); do  # the cut requests are cancelled on the server too
  running=$(metric dq_requests_running)
  [ "$running" = "0" ] && break
  sleep 0.1
done
if [ "$running" = "0" ]; then pass "Ctrl-C: no request left running on the server"
else fail "Ctrl-C: $running requests still running"; fi

finish
