#!/usr/bin/env bash
# --device on the workers and in the deployment TOML: a bad spelling is a usage error, a GPU the
# build or machine does not have is a start-up error that says so (exit 1, never a crash), and
# `dqserve up` refuses a CPU worker paired with a GPU worker (their KV dtypes differ).
source "$(dirname "$0")/lib.sh"

# expect_exit NAME RC PATTERN CMD...: the command exits with RC ("usage": any error code of the
# flag parser, not a signal) and its output matches PATTERN.
expect_exit() {
  local name=$1 want=$2 pattern=$3; shift 3
  timeout 60 "$@" >"$TMP/out" 2>&1
  local rc=$?
  local bad=0
  if [ "$want" = usage ]; then [ "$rc" -ge 1 ] && [ "$rc" -lt 128 ] || bad=1
  else [ "$rc" -eq "$want" ] || bad=1; fi
  if [ "$bad" -ne 0 ]; then fail "$name: exit $rc (want $want): $(tail -c 600 "$TMP/out")"
  elif ! grep -qE "$pattern" "$TMP/out"; then fail "$name: output does not match /$pattern/: $(tail -c 600 "$TMP/out")"
  else pass "$name: $(grep -E "$pattern" "$TMP/out" | head -1)"
  fi
}

for w in prefill decode; do
  expect_exit "dq-$w --device gpu" usage 'cpu, cuda, cuda:N' \
    "$BIN/dq-$w" --model "$TINY" --port 1 --device gpu
  # cuda:99 fails whatever the build: no CUDA here, no usable GPU, or no GPU of that index.
  expect_exit "dq-$w --device cuda:99" 1 \
    'built without CUDA|no usable CUDA device|sees [0-9]+ CUDA device' \
    "$BIN/dq-$w" --model "$TINY" --port 1 --device cuda:99
done

if "$BIN/dq-prefill" --help | grep -q -- '--device'; then pass "dq-prefill --help lists --device"
else fail "dq-prefill --help does not list --device"; fi

cat >"$TMP/mixed.toml" <<TOML
model = "$TINY"
[prefill]
device = "cpu"
[decode]
device = "cuda:0"
TOML
expect_exit "dqserve up, CPU prefill with GPU decode" 2 'on the CPU or both on GPUs' \
  "$BIN/dqserve" up --config "$TMP/mixed.toml"

cat >"$TMP/typo.toml" <<TOML
model = "$TINY"
[decode]
device = "cuda:one"
TOML
expect_exit "dqserve up, bad device" 2 '\[decode\] device "cuda:one"' \
  "$BIN/dqserve" up --config "$TMP/typo.toml"

finish
