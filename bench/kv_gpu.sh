#!/usr/bin/env bash
# On a machine with two GPUs: KV transfer bandwidth GPU -> GPU for a Qwen3-4B 8K-token prompt
# (36 layers x K,V x 8 KV heads x 128 dims x bf16 x 8192 tokens = 1.21 GB, blocks of 16 tokens,
# one post per layer and tensor, as the prefill worker posts): nccl and ucx (device blocks
# straight into device blocks) beside tcp through pinned host staging (what the workers do without
# a device transport), cuda:0 -> cuda:1. Issue 7 asks >= 100 GB/s for nccl, ucx measured beside
# it. ucx needs UCX with CUDA: this script sources .gpu/ucx-cu13/env.sh (bench/pack_ucx_libs.sh)
# when it exists and UCX_ENV is not set to "none" (or UCX_ENV=path/to/env.sh). Writes
# $OUT/kv_transfer.json (machine, commit, command, the UCX loaded, every figure) and
# $OUT/kv_transfer.md; copy them to bench/results/. Progress lines go to stderr.
# Env: DQ_BIN (default build/release-cuda/bin, needs dq-bench-kv), OUT (default /tmp/dq-bench-kv),
# DQ_COMMIT (default: git's). Extra arguments go to dq-bench-kv (e.g. --backends nccl,ucx
# --reps 10 --tokens 32768).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-bench-kv}
mkdir -p "$out"
[ -x "$bin/dq-bench-kv" ] || { echo "kv_gpu.sh: $bin/dq-bench-kv missing (a CUDA build with NCCL)"; exit 1; }
ucx_env=${UCX_ENV:-.gpu/ucx-cu13/env.sh}
if [ "$ucx_env" != none ] && [ -f "$ucx_env" ]; then
  # shellcheck disable=SC1090
  source "$ucx_env"
  echo "kv_gpu.sh: UCX from $ucx_env (UCX_TLS=$UCX_TLS)" >&2
fi
rc=0
"$bin/dq-bench-kv" --out "$out/kv_transfer.raw.json" "$@" || rc=$?
[ -f "$out/kv_transfer.raw.json" ] || { echo "kv_gpu.sh: dq-bench-kv wrote no results (exit $rc)"; exit 1; }
RAW="$out/kv_transfer.raw.json" JSON="$out/kv_transfer.json" MD="$out/kv_transfer.md" \
MACHINE="$(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | paste -sd';')" \
TOPO="$(nvidia-smi topo -m 2>/dev/null | head -4 | paste -sd'|')" \
COMMIT="${DQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" \
COMMAND="bench/kv_gpu.sh $*" python3 - <<'PY'
import json, os
raw = json.load(open(os.environ["RAW"]))
result = {"machine": os.environ["MACHINE"], "gpu_topology": os.environ["TOPO"],
          "commit": os.environ["COMMIT"], "command": os.environ["COMMAND"], **raw}
json.dump(result, open(os.environ["JSON"], "w"), indent=2)
s = raw["shape"]
lines = [f"# KV transfer GPU -> GPU on {os.environ['MACHINE']}", "",
         f"commit `{os.environ['COMMIT']}`, `{os.environ['COMMAND']}`", "",
         f"{s['layers']} layers x K,V x {s['kv_heads']} KV heads x {s['head_dim']} dims x "
         f"{s['dtype']} x {s['tokens']} tokens = {raw['bytes'] / 1e9:.3f} GB, blocks of "
         f"{s['block_size']} tokens, {raw['posts_per_rep']} posts of "
         f"{raw['bytes_per_post'] / 2**20:.1f} MiB per rep, cuda:{raw['sender_device']} -> "
         f"cuda:{raw['receiver_device']}; {raw['timing']}.", "",
         "| path | GB/s (mean) | GB/s (best) | ms per prompt (mean) | warmup ms | setup ms | bytes |",
         "|---|---|---|---|---|---|---|"]
for name, r in raw["results"].items():
    lines.append(f"| {name} | {r['gbps_mean']:.1f} | {r['gbps_best']:.1f} | "
                 f"{1e3 * r['mean_s']:.2f} | {1e3 * r['warmup_s']:.1f} | {r['setup_ms']:.1f} | "
                 f"{r['verified']} |")
lines += ["", "Target (issue 7): >= 100 GB/s effective with nccl; ucx measured beside it. Anchors: "
          "NIXL over NVLink ~132 GB/s; vLLM NIXL 1P1D without NVLink 1.8 GB/s."]
ucx = raw["results"].get("ucx", {})
if ucx.get("ucx_runtime"):
    lanes = [l.strip() for l in ucx.get("ucx_endpoint", "").splitlines() if "lane[" in l]
    lines += ["", f"ucx: {ucx['ucx_runtime']}"] + [f"    {l}" for l in lanes[:6]]
if raw.get("env"):
    lines += ["", "env: " + ", ".join(f"{k}={v}" for k, v in raw["env"].items())]
open(os.environ["MD"], "w").write("\n".join(lines) + "\n")
PY
cat "$out/kv_transfer.md"
exit $rc
