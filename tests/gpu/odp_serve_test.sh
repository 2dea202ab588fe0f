#!/usr/bin/env bash
# On the GPU machine: `dqserve up` with ODP (docs/odp.md). A tiny random Qwen3 quantized by
# dq-quantize to fp8 (the prefill checkpoint) and int4 g64 (the decode checkpoint), both workers on
# cuda:0, [odp] crossover_tokens = 1 (every prompt streams): the prefill worker says it streams,
# and a greedy completion through the router equals `dqserve generate` with the same full
# disaggregation held resident, token for token. Needs dqserve, dq-router, dq-prefill, dq-decode,
# dq-tool and dq-quantize of a CUDA build in $DQ_BIN (default build/release-cuda/bin); python3.
# Logs go to $OUT (default /tmp/dq-odp-serve). Exit 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-odp-serve}
mkdir -p "$out"
failures=0
# shellcheck source=tests/gpu/serve_lib.sh
source tests/gpu/serve_lib.sh

"$bin/dq-tool" make-tiny --out "$out/tiny" --seed 7 --hidden 256 --heads 4 --kv-heads 2 \
  --head-dim 64 --intermediate 512 --layers 5 \
  --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json >/dev/null || { echo "FAIL: make-tiny"; exit 1; }
"$bin/dq-quantize" --model "$out/tiny" --out "$out/fp8" --format fp8 >"$out/q.log" 2>&1 &&
  "$bin/dq-quantize" --model "$out/tiny" --out "$out/int4" --format int4 --group-size 64 \
    >>"$out/q.log" 2>&1 || { echo "FAIL: dq-quantize: $(tail -3 "$out/q.log")"; exit 1; }

prompt="Offloaded prefill streams the weights and changes nothing else about the answer"
n=16
want=$("$bin/dqserve" generate --device cuda --model "$out/int4" --raw --prompt "$prompt" \
  --max-tokens $n --prefill-weights "$out/fp8" --prefill-compute w8a8 \
  --decode-weights "$out/int4" 2>"$out/ref.err") || { echo "FAIL: reference: $(tail -3 "$out/ref.err")"; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$out/odp.toml" <<TOML
model = "$out/int4"
[router]
port = $port
[prefill]
weights = "$out/fp8"
compute = "w8a8"
device = "cuda:0"
token_budget = 4096
[decode]
weights = "$out/int4"
device = "cuda:0"
[odp]
crossover_tokens = 1
image_dir = "$out"
TOML
start_up "$out/odp.toml" "$out/up.log" --worker-log-level info || {
  echo "$failures failure(s)"
  exit 1
}
grep -q "layers streamed" "$out/up.log" && pass "the prefill worker streams its layers" ||
  fail "no 'layers streamed' line in $out/up.log"

got=$(PORT=$port PROMPT=$prompt N=$n python3 - <<'PY'
import http.client, json, os
c = http.client.HTTPConnection("127.0.0.1", int(os.environ["PORT"]), timeout=300)
c.request("GET", "/v1/models")
model = json.loads(c.getresponse().read())["data"][0]["id"]
c.request("POST", "/v1/completions", json.dumps({
    "model": model, "prompt": os.environ["PROMPT"], "max_tokens": int(os.environ["N"]),
    "temperature": 0}), {"Content-Type": "application/json"})
r = c.getresponse()
body = json.loads(r.read())
print(body["choices"][0]["text"] if r.status == 200 else f"HTTP {r.status}: {body}", end="")
PY
)
[ "$got" = "$want" ] && pass "completion through ODP == resident full disaggregation: '$got'" ||
  fail "completion '$got' differs from the resident reference '$want'"

kill -INT $up; wait $up
rc=$?
[ $rc -eq 0 ] && pass "Ctrl-C stops the deployment" || fail "dqserve up exited $rc"
[ -z "$(ls "$out"/dq-odp-*.img 2>/dev/null)" ] && pass "image file removed at exit" ||
  fail "image left behind: $(ls "$out"/dq-odp-*.img)"
if [ "$failures" -ne 0 ]; then echo "$failures failure(s) (logs: $out)"; exit 1; fi
echo "all passed"
