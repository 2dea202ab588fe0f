#!/usr/bin/env bash
# On the GPU machine: disaggregated serving with both workers on the GPU (issue 5). Starts
# `dqserve up` on SmolLM2 with [prefill] and [decode] device = "cuda:0" over the tcp transport
# (KV crosses through pinned host staging buffers), and checks:
#   1. both workers say they run on cuda:0 with staged KV, and the router reports them healthy;
#   2. greedy chat output equals single-process `dqserve generate --device cuda` token for token
#      (two prompts, up to N tokens, the same stop), and stays close to the CPU's output;
#   3. KV really crossed (dq_kv_transfer_bytes_total grew by about the prompts' KV size);
#   4. concurrent requests all complete (batched prefill through the arena, batched decode);
#   5. Ctrl-C stops everything (exit 0).
# Needs the release-cuda binaries (dqserve, dq-router, dq-prefill, dq-decode) in $DQ_BIN
# (default build/release-cuda/bin) and models/SmolLM2-135M-Instruct.Q4_1.gguf (or $SMOLLM2);
# python3 (stdlib only). Logs go to $OUT (default /tmp/dq-serve-cuda). Exit 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
model=${SMOLLM2:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
out=${OUT:-/tmp/dq-serve-cuda}
device=${DQ_DEVICE:-cuda:0}   # DQ_DEVICE=cpu DQ_REF_DEVICE=cpu: the harness itself, anywhere
ref_device=${DQ_REF_DEVICE:-cuda}
# DQ_TRANSPORT=nccl with DQ_PREFILL_DEVICE / DQ_DECODE_DEVICE on two GPUs: serve_nccl_test.sh.
transport=${DQ_TRANSPORT:-tcp}
prefill_device=${DQ_PREFILL_DEVICE:-$device}
decode_device=${DQ_DECODE_DEVICE:-$device}
staged=""
[[ $device == cuda* ]] && staged=".*through pinned host staging"
mkdir -p "$out"
for b in dqserve dq-router dq-prefill dq-decode; do
  [ -x "$bin/$b" ] || { echo "FAIL: $bin/$b missing (build the release-cuda preset)"; exit 1; }
done
[ -f "$model" ] || { echo "FAIL: $model missing (scripts/setup.sh fetches it)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  tee "$out/gpu.txt"

failures=0
# shellcheck source=tests/gpu/serve_lib.sh
source tests/gpu/serve_lib.sh

n=48
prompts=("Write a short story about a robot who learns to paint. Describe the colors it discovers and how it feels."
         "What is the capital of France?")
# References: single process, same weights, batch of one.
for i in 0 1; do
  for d in "$ref_device" cpu; do
    if ! "$bin/dqserve" generate --model "$model" --prompt "${prompts[$i]}" --max-tokens "$n" \
        --device "$d" >"$out/ref_${d}_$i.txt" 2>"$out/ref_${d}_$i.log"; then
      fail "dqserve generate --device $d: $(tail -c 500 "$out/ref_${d}_$i.log")"
    fi
  done
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
cat >"$out/serve.toml" <<TOML
model = "$model"
[router]
port = $port
[transfer]
backend = "$transport"
[prefill]
device = "$prefill_device"
[decode]
device = "$decode_device"
TOML
start_up "$out/serve.toml" "$out/up.log" || {
  echo "$failures failure(s)"
  exit 1
}
if [ "$transport" = nccl ]; then
  grep -q "dq-prefill: .* on $prefill_device, .*transports nccl (nccl straight from device blocks)" \
    "$out/up.log" && pass "dq-prefill runs on $prefill_device, nccl from device blocks" ||
    fail "dq-prefill is not on $prefill_device with nccl (see $out/up.log)"
  grep -q "dq-decode: serving on .*device $decode_device, KV transport nccl straight into device blocks" \
    "$out/up.log" && pass "dq-decode runs on $decode_device, nccl into device blocks" ||
    fail "dq-decode is not on $decode_device with nccl (see $out/up.log)"
  grep -q "through pinned host staging" "$out/up.log" && fail "a worker still stages KV through host memory"
  served_on="$prefill_device -> $decode_device (nccl)"
else
  grep -q "dq-prefill: .* on $device, $staged" "$out/up.log" &&
    pass "dq-prefill runs on $device with staged KV" || fail "dq-prefill is not on $device (see $out/up.log)"
  grep -q "dq-decode: serving on .*device $device, KV transport tcp$staged" "$out/up.log" &&
    pass "dq-decode runs on $device with staged KV" || fail "dq-decode is not on $device (see $out/up.log)"
  served_on=$device
fi

PORT=$port N=$n OUT_DIR=$out REF=$ref_device DEVICE="$served_on" PROMPT0=${prompts[0]} PROMPT1=${prompts[1]} python3 - <<'PY'
import http.client, json, os, sys, threading

port, n, out = int(os.environ["PORT"]), int(os.environ["N"]), os.environ["OUT_DIR"]
prompts = [os.environ["PROMPT0"], os.environ["PROMPT1"]]
failures = 0

def check(cond, msg):
    global failures
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    failures += 0 if cond else 1
    return cond

sys.path.insert(0, "tests/gpu")
from serve_client import Router
router = Router(port)
call, metric = router.call, router.metric

def chat(prompt, max_tokens):
    model = json.loads(call("GET", "/v1/models")[1])["data"][0]["id"]
    status, raw = call("POST", "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0})
    body = json.loads(raw)
    return status, body

def common_prefix(a, b):
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k

status, raw = call("GET", "/health")
check(status == 200, f"/health 200 ({raw[:200]!r})")
before = metric("dq_kv_transfer_bytes_total")
for i, prompt in enumerate(prompts):
    ref_gpu = open(f"{out}/ref_{os.environ['REF']}_{i}.txt").read().rstrip("\n")
    ref_cpu = open(f"{out}/ref_cpu_{i}.txt").read().rstrip("\n")
    status, body = chat(prompt, n)
    if not check(status == 200, f"prompt {i}: HTTP {status}"):
        print(body)
        continue
    got = body["choices"][0]["message"]["content"]
    ref = os.environ["REF"]
    check(got == ref_gpu, f"prompt {i}: served on {os.environ['DEVICE']} == dqserve generate "
                          f"--device {ref} (greedy, up to {n} tokens)")
    if got != ref_gpu:
        print(f"  generate: {ref_gpu!r}\n  served:   {got!r}")
    finish, used = body["choices"][0]["finish_reason"], body["usage"]["completion_tokens"]
    check((finish == "length" and used == n) or (finish == "stop" and 0 < used < n),
          f"prompt {i}: {used} tokens, finish_reason {finish}")
    # bf16 GPU numerics vs the CPU's f32: greedy paths may part late, never at once.
    k = common_prefix(got, ref_cpu)
    check(k >= min(len(ref_cpu), 40) or got == ref_cpu,
          f"prompt {i}: close to the CPU's output (first {k} of {len(ref_cpu)} characters agree)")
    if got != ref_cpu:
        print(f"  cpu:      {ref_cpu!r}")
check("Paris" in chat(prompts[1], 16)[1]["choices"][0]["message"]["content"],
      "the capital of France is Paris")
moved = metric("dq_kv_transfer_bytes_total") - before
# SmolLM2: 30 layers x K,V x 3 kv heads x 64 dims x bf16 = 23040 bytes per token, whole blocks.
check(moved >= 23040 * 20, f"KV crossed between the workers ({moved:.0f} bytes)")

results = [None] * 6
def worker(j):
    results[j] = chat(prompts[j % 2] + (" Answer briefly." if j >= 2 else ""), 24)
threads = [threading.Thread(target=worker, args=(j,)) for j in range(6)]
for t in threads: t.start()
for t in threads: t.join()
check(all(r is not None and r[0] == 200 and 0 < r[1]["usage"]["completion_tokens"] <= 24
          and r[1]["choices"][0]["finish_reason"] in ("stop", "length") for r in results),
      "6 concurrent requests complete")
status, raw = call("GET", "/health")
h = json.loads(raw)
check(status == 200 and all(w.get("status") == "serving" for w in h.get("workers", [])),
      "workers still serving after the load")
sys.exit(1 if failures else 0)
PY
[ $? -eq 0 ] || failures=$((failures + 1))

kill -INT $up
wait $up
rc=$?
[ $rc -eq 0 ] && pass "dqserve up stopped on Ctrl-C" || fail "dqserve up exited $rc on Ctrl-C"
grep -iE "error|CUDA error" "$out/up.log" | grep -v "level\|log-level" | head -5
if [ $failures -ne 0 ]; then echo "$failures failure(s) (logs in $out)"; exit 1; fi
echo "all passed (logs in $out)"
