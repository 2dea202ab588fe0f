#!/usr/bin/env bash
# On a two-GPU machine (issue 7): the serving measurements users choose a deployment by, on a
# Qwen3-4B-shaped random checkpoint made here (dq-tool make-tiny --parallel + dq-quantize).
#   1. TTFT colocated vs disaggregated at DQ_LENGTHS prompt tokens (default 1K / 8K / 32K), for
#      bf16 and fp8 (w8a8) prefill. Colocated = one process, one GPU (`dqserve generate
#      --device cuda`: prefill + first token, no transfer, no HTTP); disaggregated = router +
#      prefill worker on cuda:0 + decode worker on cuda:1 over DQ_TRANSPORT (default nccl),
#      measured by `dq-bench serve` on the same prompts as token ids (--dataset, max_tokens 2;
#      neither side's figure includes tokenization).
#   2. `dq-bench serve --sweep-concurrency 1,2,4,8`: TTFT / TPOT of fp8 prefill + int4 and int2
#      decode, and of bf16 prefill + bf16 decode, at 1K-token prompts and 128 output tokens.
# (A decode worker killed under load: tests/gpu/serve_faults_gpu.py.)
# Results: $OUT/serve_gpu.json (+ every dq-bench JSON and log). DQ_DRY=1 runs the same steps on a
# tiny model on the CPU (a harness check; the figures mean nothing). DQ_TTFT_ONLY=1: step 1 only
# (no int2 checkpoint, no sweeps). DQ_PREFILL_FORMATS (default "bf16 fp8") picks the prefill
# formats; DQ_SKIP_COLOCATED=1 skips the colocated runs (variants of the disaggregated side);
# DQ_WORKER_LOG_LEVEL=debug makes the router and workers log each request's time split.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${DQ_BIN:-build/release-cuda/bin}
out=${OUT:-/tmp/dq-serve-gpu}
work=${DQ_WORK:-/tmp/dq-serve-gpu-work}
mkdir -p "$out" "$work"
if [ "${DQ_DRY:-0}" = 1 ]; then
  shape="--hidden 128 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 --intermediate 256"
  dev0=cpu dev1=cpu transport=${DQ_TRANSPORT:-tcp} gen_dev=cpu
  lengths=${DQ_LENGTHS:-"64 256"} sweep=${DQ_SWEEP:-"1,2"} sweep_n=4 out_len=16 in_len=64
else
  shape="--hidden 2560 --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --intermediate 9728"
  dev0=cuda:0 dev1=cuda:1 transport=${DQ_TRANSPORT:-nccl} gen_dev=cuda
  lengths=${DQ_LENGTHS:-"1024 8192 32768"} sweep=${DQ_SWEEP:-"1,2,4,8"} sweep_n=16 out_len=128
  in_len=1024
fi
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/serve_gpu.log"; }
# DQ_TRANSPORT=ucx: the workers load the UCX with CUDA that bench/pack_ucx_libs.sh packed (its
# cuda_ipc moves KV with the copy engines, no SMs taken from the prefill), as bench/kv_gpu.sh does.
if [ "$transport" = ucx ] && [ -f "${UCX_ENV:-.gpu/ucx-cu13/env.sh}" ]; then
  # shellcheck disable=SC1090
  source "${UCX_ENV:-.gpu/ucx-cu13/env.sh}"
  log "UCX from ${UCX_ENV:-.gpu/ucx-cu13/env.sh} (UCX_TLS=$UCX_TLS)"
fi
for b in dqserve dq-router dq-prefill dq-decode dq-tool dq-quantize; do
  [ -x "$bin/$b" ] || { log "FAIL: $bin/$b missing"; exit 1; }
done

# 1. The checkpoints: bf16 (random, Qwen3-4B shape, 40K context), fp8, int4 g128, int2 g64.
if [ ! -f "$work/bf16/model.safetensors" ]; then
  log "making the bf16 checkpoint ($shape)"
  "$bin/dq-tool" make-tiny --parallel --out "$work/bf16" $shape --max-context 40960 \
    --tokenizer tests/golden/tokenizer/qwen-style/tokenizer.json \
    --chat-template tests/golden/chat/qwen3_template.jinja >/dev/null || exit 1
fi
ttft_only=${DQ_TTFT_ONLY:-0}
formats="fp8:fp8 int4:int4 int2:int2"
[ "$ttft_only" = 1 ] && formats="fp8:fp8 int4:int4"
for f in $formats; do
  name=${f%%:*} fmt=${f##*:} gs=""
  [ "$fmt" = int4 ] && gs="--group-size 128"
  [ "$fmt" = int2 ] && gs="--group-size 64"
  if [ ! -f "$work/$name/model.safetensors" ]; then
    log "quantizing to $name"
    "$bin/dq-quantize" --model "$work/bf16" --out "$work/$name" --format "$fmt" $gs \
      >"$out/quantize_$name.log" 2>&1 || { log "FAIL: dq-quantize $name"; exit 1; }
  fi
done

# Prompts of about N tokens each: common words, trimmed until the tokenizer says <= N.
make_prompt() {  # N -> $work/prompt_N.txt
  local n=$1 f="$work/prompt_$1.txt"
  [ -f "$f" ] && return
  python3 - "$n" "$f" "$bin/dq-tool" "$work/bf16" <<'PY'
import json, random, subprocess, sys
n, path, tool, model = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
words = ("the of and to in is was for on that with as by at from his her which an be this are "
         "or had not but were have it one all their they there been has more its when who will "
         "would no if out so said what up about into than them can only other time new some "
         "could these two may first then do any like my now over such our man me even most made "
         "after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still "
         "own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used "
         "take three").split()
rng = random.Random(n)
def count(ws):
    open(path, "w").write(" ".join(ws))
    r = subprocess.run([tool, "tokenize", "--model", model, "--file", path], capture_output=True,
                       text=True, check=True)
    return len(json.loads(r.stdout))
ws = [rng.choice(words) for _ in range(n)]
while True:
    c = count(ws)
    if c <= n:
        break
    ws = ws[: max(1, len(ws) - (c - n) - 1)]
PY
}
for n in $lengths $in_len; do make_prompt "$n"; done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
compute_of() { [ "$1" = fp8 ] && echo w8a8 || echo weight_only; }

# 2. Colocated TTFT: one process per prefill format, prompts as raw interactive turns (one load).
prefill_formats=${DQ_PREFILL_FORMATS:-"bf16 fp8"}
reps=${DQ_TTFT_REPS:-5}  # TTFT runs per length and side (after one warm-up)
colocated_formats=$prefill_formats
[ "${DQ_SKIP_COLOCATED:-0}" = 1 ] && colocated_formats=""
for pf in $colocated_formats; do
  log "colocated TTFT, $pf prefill on $gen_dev"
  {
    cat "$work/prompt_$in_len.txt"; echo  # warm-up turn
    for n in $lengths; do for _ in $(seq "$reps"); do cat "$work/prompt_$n.txt"; echo; done; done
  } | timeout 900 "$bin/dqserve" generate --model "$work/bf16" --prefill-weights "$work/$pf" \
      --prefill-compute "$(compute_of "$pf")" --device "$gen_dev" --interactive --raw \
      --max-tokens 1 --kv-capacity 40960 >"$out/colocated_$pf.out" 2>"$out/colocated_$pf.log" ||
    log "FAIL: colocated $pf: $(tail -c 400 "$out/colocated_$pf.log")"
done

# Starts `dqserve up` with the given prefill / decode weights; sets $up and $port.
start_up() {  # name prefill_fmt decode_fmt
  port=$(free_port)
  cat >"$out/$1.toml" <<TOML
model = "$work/bf16"
[router]
port = $port
max_in_flight = 16
max_queue = 64
[transfer]
backend = "$transport"
io_timeout_ms = 5000
[prefill]
weights = "$work/$2"
compute = "$(compute_of "$2")"
device = "$dev0"
token_budget = 8192
[decode]
weights = "$work/$3"
device = "$dev1"
max_batch = 8
kv_capacity = 98304
TOML
  "$bin/dqserve" up --config "$out/$1.toml" --worker-log-level "${DQ_WORKER_LOG_LEVEL:-info}" \
    >"$out/$1.up.log" 2>&1 &
  up=$!
  for _ in $(seq 1 1200); do
    grep -q "dqserve: serving" "$out/$1.up.log" && return 0
    kill -0 $up 2>/dev/null || break
    sleep 0.5
  done
  log "FAIL: dqserve up ($1) did not start: $(tail -c 1500 "$out/$1.up.log")"
  kill $up 2>/dev/null
  wait $up 2>/dev/null
  return 1
}
stop_up() { kill -INT $up 2>/dev/null; wait $up 2>/dev/null; }
bench() {  # name args... -> $out/name.json
  local name=$1; shift
  timeout 900 python3 bench/dq-bench serve --endpoint "http://127.0.0.1:$port" -q \
    --out "$out/$name.json" "$@" >"$out/$name.txt" 2>&1 || log "FAIL: dq-bench $name (see $name.txt)"
}

# 3. Disaggregated TTFT on the same prompts, and the concurrency sweeps.
for pf in $prefill_formats; do
  df=$([ "$pf" = bf16 ] && echo bf16 || echo int4)
  start_up "disagg_$pf" "$pf" "$df" || continue
  log "disaggregated TTFT, $pf prefill on $dev0, $df decode on $dev1, $transport"
  for n in $lengths; do
    # Token ids (the completions API's list form), as the colocated run's prefill time excludes
    # tokenization too.
    "$bin/dq-tool" tokenize --model "$work/bf16" --file "$work/prompt_$n.txt" |
      python3 -c 'import json,sys; print(json.dumps({"prompt": json.load(sys.stdin), "max_tokens": 2}))' \
        >"$work/ds_$n.jsonl"
    bench "ttft_disagg_${pf}_$n" --dataset "$work/ds_$n.jsonl" --concurrency 1 --num-requests "$reps" \
      --warmup 1 --no-calibrate
  done
  if [ "$ttft_only" = 1 ]; then
    stop_up
    continue
  fi
  log "sweep $sweep, $pf prefill + $df decode"
  bench "sweep_${pf}_$df" --sweep-concurrency "$sweep" --num-requests "$sweep_n" \
    --input-len "$in_len" --output-len "$out_len" --warmup 2
  if [ "$pf" = fp8 ]; then
    stop_up
    start_up "disagg_fp8_int2" fp8 int2 || continue
    log "sweep $sweep, fp8 prefill + int2 decode"
    bench "sweep_fp8_int2" --sweep-concurrency "$sweep" --num-requests "$sweep_n" \
      --input-len "$in_len" --output-len "$out_len" --warmup 2
  fi
  stop_up
done

python3 - "$out" "$lengths" "$transport" "$reps" <<'PY' | tee -a "$out/serve_gpu.log"
import glob, json, os, re, sys
out, lengths, transport, reps = sys.argv[1], sys.argv[2].split(), sys.argv[3], int(sys.argv[4])
res = {"transport": transport, "ttft_ms": {}, "sweeps": {}}
for pf in ("bf16", "fp8"):
    col = {}
    try:
        log = open(f"{out}/colocated_{pf}.log").read()
        runs = [(int(a), float(b)) for a, b in re.findall(r"\[(\d+) prompt tokens in ([\d.]+) s", log)]
        for n in lengths:  # the first turn is the warm-up; then `reps` per length
            i = 1 + reps * lengths.index(n)
            got = runs[i:i + reps]
            if got:
                ms = sorted(s * 1e3 for _, s in got)
                col[n] = {"prompt_tokens": got[0][0], "ms": ms[0], "ms_p50": ms[len(ms) // 2]}
    except (OSError, ValueError):
        pass
    for n in lengths:
        row = {"colocated": col.get(n)}
        try:
            j = json.load(open(f"{out}/ttft_disagg_{pf}_{n}.json"))
            s = j["runs"][0]["summary"]
            row["disaggregated_ms"] = {"min": s["ttft_ms"]["min"], "p50": s["ttft_ms"]["p50"],
                                       "mean": s["ttft_ms"]["mean"]}
            recs = j["runs"][0].get("requests", [])
            row["disaggregated_prompt_tokens"] = recs[0].get("prompt_tokens") if recs else None
        except (OSError, KeyError, IndexError, ValueError):
            row["disaggregated_ms"] = None
        if row["colocated"] and row["disaggregated_ms"]:
            # The same statistic on both sides: median over median, best over best.
            row["ratio_p50"] = row["disaggregated_ms"]["p50"] / row["colocated"]["ms_p50"]
            row["ratio_min"] = row["disaggregated_ms"]["min"] / row["colocated"]["ms"]
        res["ttft_ms"].setdefault(pf, {})[n] = row
for f in sorted(glob.glob(f"{out}/sweep_*.json")):
    j = json.load(open(f))
    res["sweeps"][os.path.basename(f)[6:-5]] = [
        {"concurrency": r["mode"].get("concurrency"), "ttft_ms_p50": r["summary"]["ttft_ms"]["p50"],
         "ttft_ms_p99": r["summary"]["ttft_ms"]["p99"], "tpot_ms_p50": r["summary"]["tpot_ms"]["p50"],
         "tpot_ms_p99": r["summary"]["tpot_ms"]["p99"],
         "output_tok_s": r["summary"]["output_throughput"],
         "completed": r["summary"].get("completed"), "failed": r["summary"].get("failed")}
        for r in j["runs"]]
json.dump(res, open(f"{out}/serve_gpu.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY
