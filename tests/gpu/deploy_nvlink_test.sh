#!/usr/bin/env bash
# On a machine with two GPUs: the single-node NVLink deployment of deploy/ (issue 7) as real
# processes. Runs `dqserve up --config` on deploy/compose/disagg-nvlink.toml (the TOML that
# deploy/docker-compose.nvlink.yml and deploy/k8s/nvlink run), rewritten only for this machine:
# the model path, 127.0.0.1 and free ports; devices (prefill cuda:0, decode cuda:1) and
# [transfer] backend = "nccl" as written. The workers get the NCCL environment of the compose
# file's x-nccl-p2p block (NCCL_HOSTID, NCCL_CUMEM_ENABLE=0, ...), with NCCL_DEBUG=INFO, so the
# path NCCL picks between the two workers is the one the containers would get. Checks:
#   1. the prefill worker posts from device blocks on cuda:0, the decode worker receives into
#      device blocks on cuda:1, over nccl, and neither stages KV through host memory;
#   2. a chat completion through the router answers (greedy: "... Paris ...");
#   3. the KV crossed over nccl: dq_kv_transfer_bytes_total grew, and NCCL's own log shows the
#      channels between the two workers connected peer to peer ("via P2P/..."), not over a
#      network transport ("via NET/...");
#   4. Ctrl-C stops everything (exit 0).
# Needs the release-cuda binaries built with NCCL (dqserve, dq-router, dq-prefill, dq-decode) in
# $DQ_BIN (default build/release-cuda/bin), SmolLM2 at $SMOLLM2 (default
# models/SmolLM2-135M-Instruct.Q4_1.gguf) and python3 (stdlib only). Logs go to $OUT (default
# /tmp/dq-deploy-nvlink). Exit 0 when all passed. What it cannot show: the containers themselves
# (no container engine here); `nvidia-smi topo -m` (saved in $OUT/topo.txt) says whether the
# GPUs' P2P path is NVLink (NV#) or PCIe.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${DQ_BIN:-build/release-cuda/bin}
model=${SMOLLM2:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
out=${OUT:-/tmp/dq-deploy-nvlink}
toml=deploy/compose/disagg-nvlink.toml
compose=deploy/docker-compose.nvlink.yml
mkdir -p "$out"
unset DQ_API_KEY  # [router] api_key_env: this test sends no key
for b in dqserve dq-router dq-prefill dq-decode; do
  [ -x "$bin/$b" ] || { echo "FAIL: $bin/$b missing (build the release-cuda preset)"; exit 1; }
done
[ -f "$model" ] || { echo "FAIL: $model missing (scripts/setup.sh fetches it, or set SMOLLM2)"; exit 1; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 2 ] || { echo "FAIL: needs two GPUs, nvidia-smi lists $gpus"; exit 1; }
nvidia-smi topo -m >"$out/topo.txt" 2>&1
head -4 "$out/topo.txt"

failures=0
# shellcheck source=tests/gpu/serve_lib.sh
source tests/gpu/serve_lib.sh

# The TOML for this machine, and the compose file's NCCL environment as `export` lines.
port=$(MODEL=$model TOML=$toml OUT_TOML=$out/dqserve.toml python3 - <<'PY'
import os, re, socket

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

ports = {"router": free_port(), "prefill": free_port(), "decode": free_port()}
out, table = [], ""
for line in open(os.environ["TOML"]).read().splitlines():
    if m := re.fullmatch(r"\[(\w+)\]\s*", line):
        table = m.group(1)
    if line.startswith("model = "):
        line = f'model = "{os.environ["MODEL"]}"'
    line = re.sub(r'^host = "0\.0\.0\.0"', 'host = "127.0.0.1"', line)
    if re.match(r"port\s*=", line):
        line = f"port = {ports[table]}"
    out.append(line)
open(os.environ["OUT_TOML"], "w").write("\n".join(out) + "\n")
print(ports["router"])
PY
)
[ -n "$port" ] || { echo "FAIL: could not write $out/dqserve.toml"; exit 1; }
grep -E '^(backend|device) ' "$out/dqserve.toml" | sed 's/ *#.*//' | tr '\n' ' '; echo
COMPOSE=$compose python3 - >"$out/nccl_env.sh" <<'PY'
import os, re
text = open(os.environ["COMPOSE"]).read()
block = text[text.index("x-nccl-p2p:"):text.index("\nservices:")]
for key, value in re.findall(r"^    ((?:NCCL|CUDA)_\w+): (.*)$", block, re.M):
    value = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value).strip('"')
    print(f"export {key}={value}")
print("export NCCL_DEBUG=INFO")  # the channel lines ("via P2P/IPC") are INFO
PY
cat "$out/nccl_env.sh"
grep -q NCCL_HOSTID "$out/nccl_env.sh" || fail "no NCCL environment found in $compose"
# shellcheck disable=SC1091
source "$out/nccl_env.sh"

start_up "$out/dqserve.toml" "$out/up.log" || {
  echo "$failures failure(s) (logs in $out)"
  exit 1
}
grep -q "dq-prefill: .* on cuda:0, .*transports nccl (nccl straight from device blocks)" \
  "$out/up.log" && pass "dq-prefill on cuda:0 posts KV over nccl from device blocks" ||
  fail "dq-prefill is not on cuda:0 with nccl (see $out/up.log)"
grep -q "dq-decode: serving on .*device cuda:1, KV transport nccl straight into device blocks" \
  "$out/up.log" && pass "dq-decode on cuda:1 receives KV over nccl into device blocks" ||
  fail "dq-decode is not on cuda:1 with nccl (see $out/up.log)"
grep -q "through pinned host staging" "$out/up.log" && fail "a worker stages KV through host memory"

PORT=$port python3 - <<'PY'
import http.client, json, os, sys

port = int(os.environ["PORT"])
failures = 0

def check(cond, msg):
    global failures
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    failures += 0 if cond else 1

sys.path.insert(0, "tests/gpu")
from serve_client import Router
router = Router(port)
call, metric = router.call, router.metric

status, raw = call("GET", "/health")
check(status == 200, f"/health 200 ({raw[:200]!r})")
before = metric("dq_kv_transfer_bytes_total")
model = json.loads(call("GET", "/v1/models")[1])["data"][0]["id"]
status, raw = call("POST", "/v1/chat/completions", {
    "model": model, "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "max_tokens": 16, "temperature": 0})
body = json.loads(raw)
text = body["choices"][0]["message"]["content"] if status == 200 else ""
check(status == 200 and "Paris" in text, f"chat completion through the router: {text!r}")
moved = metric("dq_kv_transfer_bytes_total") - before
prompt = body.get("usage", {}).get("prompt_tokens", 0)
check(moved > 0, f"KV crossed between the workers: {moved:.0f} bytes for {prompt} prompt tokens")
sys.exit(1 if failures else 0)
PY
[ $? -eq 0 ] || failures=$((failures + 1))

# NCCL's INFO lines of the workers' communicator: each channel and the transport it uses.
grep -E "NCCL INFO Channel .* via " "$out/up.log" | head -4
if grep -qE "NCCL INFO Channel .* via P2P" "$out/up.log"; then
  pass "NCCL connected the workers peer to peer: $(grep -oE 'via P2P/[A-Za-z/]+' "$out/up.log" | sort -u | tr '\n' ' ')"
else
  fail "no NCCL channel via P2P in $out/up.log"
fi
grep -qE "NCCL INFO Channel .* via (NET|SHM)" "$out/up.log" &&
  fail "NCCL routed a channel through the network or host memory: $(grep -oE 'via (NET|SHM)/[A-Za-z/]+' "$out/up.log" | sort -u | tr '\n' ' ')"
grep -q "NCCL_HOSTID set by environment" "$out/up.log" || fail "NCCL did not report NCCL_HOSTID"

kill -INT $up
wait $up
rc=$?
[ $rc -eq 0 ] && pass "dqserve up stopped on Ctrl-C" || fail "dqserve up exited $rc on Ctrl-C"
if [ $failures -ne 0 ]; then echo "$failures failure(s) (logs in $out)"; exit 1; fi
echo "all passed (logs in $out)"
