# Shared helpers for the end-to-end shell tests (sourced).
set -uo pipefail
BIN=${DQ_BIN_DIR:?run through ctest}
SRC=${DQ_SOURCE_DIR:?run through ctest}
TINY=$(dirname "$BIN")/tiny-qwen3
SMOL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# expect_error NAME PATTERN CMD...: the command must exit with status 1 (not a crash) and
# print exactly one line starting with "error:" that matches PATTERN.
expect_error() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  local lines; lines=$(grep -c '^error:' "$TMP/err")
  if [ "$rc" -ne 1 ]; then fail "$name: exit code $rc (want 1); stderr: $(head -c 400 "$TMP/err")"
  elif [ "$lines" -ne 1 ]; then fail "$name: $lines error lines: $(cat "$TMP/err")"
  elif ! grep -qiE "$pattern" "$TMP/err"; then fail "$name: error does not match /$pattern/: $(cat "$TMP/err")"
  else pass "$name: $(cat "$TMP/err")"
  fi
}

finish() {
  if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
  echo "all passed"
}
