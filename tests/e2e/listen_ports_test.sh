#!/usr/bin/env bash
# Ports: every server binds exclusively (a second process on a port in use fails and says so,
# instead of sharing it through SO_REUSEPORT), out-of-range ports are refused by name, and
# dqserve up reports a port in use before it starts anything.
source "$(dirname "$0")/lib.sh"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN/dq-router" --model "$TINY" --port "$port" --log-level warn >"$TMP/first.log" 2>&1 &
first=$!
trap 'kill $first 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

# expect_exit NAME CODE PATTERN CMD...: exits with CODE within 30 s and prints PATTERN.
expect_exit() {
  local name=$1 want=$2 pattern=$3; shift 3
  timeout 30 "$@" >"$TMP/out" 2>&1
  local rc=$?
  if [ "$rc" -eq 124 ]; then fail "$name: still running after 30 s (it did not refuse)"
  elif [ "$rc" -ne "$want" ]; then fail "$name: exit code $rc (want $want): $(tail -c 400 "$TMP/out")"
  elif ! grep -qiE -e "$pattern" "$TMP/out"; then fail "$name: output does not match /$pattern/: $(tail -c 400 "$TMP/out")"
  else pass "$name: $(grep -iE -e "$pattern" "$TMP/out" | head -1)"
  fi
}

in_use="port $port on 127.0.0.1 is in use by another process"
expect_exit "a second router on the same HTTP port" 1 "$in_use" \
  "$BIN/dq-router" --model "$TINY" --port "$port"
expect_exit "a router whose gRPC port is in use" 1 "gRPC.*$in_use" \
  "$BIN/dq-router" --model "$TINY" --port 0 --grpc-port "$port"
expect_exit "a decode worker on a port in use" 1 "$in_use" \
  "$BIN/dq-decode" --model "$TINY" --port "$port" --threads 1
expect_exit "a prefill worker on a port in use" 1 "$in_use" \
  "$BIN/dq-prefill" --model "$TINY" --port "$port" --threads 1
expect_exit "dq-router --port 70000" 105 "--port.*70000.*range" \
  "$BIN/dq-router" --model "$TINY" --port 70000
expect_exit "dq-router --grpc-port -1" 105 "--grpc-port.*-1.*range" \
  "$BIN/dq-router" --model "$TINY" --grpc-port -1
expect_exit "dqserve up --port -5" 2 "--port is -5; a port must be in \[1, 65535\]" \
  "$BIN/dqserve" up --port -5
expect_exit "dqserve up --port 70000" 2 "--port is 70000; a port must be in \[1, 65535\]" \
  "$BIN/dqserve" up --port 70000
cat >"$TMP/up.toml" <<TOML
model = "$TINY"
[router]
port = $port
TOML
expect_exit "dqserve up on a router port in use" 1 "\[router\] port: $in_use" \
  "$BIN/dqserve" up --config "$TMP/up.toml"
cat >"$TMP/bad.toml" <<TOML
model = "$TINY"
[decode]
port = 70000
TOML
expect_exit "dqserve up with [decode] port = 70000" 2 "\[decode\] port is 70000; a port must be in" \
  "$BIN/dqserve" up --config "$TMP/bad.toml"
kill -0 "$first" 2>/dev/null && pass "the first router still runs" || fail "the first router died"
finish
