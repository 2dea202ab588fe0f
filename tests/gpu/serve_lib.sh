# Shared by the GPU serving tests (sourced from the repository root, after `bin` and `failures=0`
# are set): pass / fail lines, and `dqserve up` started and waited for.
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# start_up CONFIG LOG [dqserve up options...]: starts `dqserve up` in the background ($up is its
# pid) and waits until it serves (up to 5 minutes). Otherwise it records a failure with the log's
# tail, stops what started and returns 1.
start_up() {
  local config=$1 log=$2
  shift 2
  "$bin/dqserve" up --config "$config" "$@" >"$log" 2>&1 &
  up=$!
  for _ in $(seq 1 600); do
    grep -q "dqserve: serving" "$log" && return 0
    kill -0 "$up" 2>/dev/null || break
    sleep 0.5
  done
  grep -q "dqserve: serving" "$log" && return 0
  fail "dqserve up did not start: $(tail -c 3000 "$log")"
  kill "$up" 2>/dev/null
  wait "$up" 2>/dev/null
  return 1
}
