#!/usr/bin/env python3
"""CPU prefill/decode speed of dqserve vs llama.cpp on the same GGUF file, in the same run.

    python3 bench/cpu_vs_llamacpp.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --dq-bench build/release/bin/dq-bench-cpu [--threads N] [--out bench/results]

llama.cpp runs through llama-cpp-python (built from source by bench/cpu.sh). Both engines see
the same random prompt length, decode greedily one token at a time, and report the best of
`--reps` runs (decode also as their median: the cores may be shared). The decode roofline is memory bandwidth (measured here with a large copy) divided
by the bytes of weights read per token.
"""
import argparse
import datetime
import json
import os
import subprocess
import time

import numpy as np

from machine_info import machine


def memory_bandwidth(gib=0.5, reps=5):
    n = int(gib * (1 << 30)) // 4
    a = np.ones(n, dtype=np.float32)
    b = np.empty_like(a)
    best = 1e30
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best  # read + write


def weight_bytes(path):
    import gguf
    r = gguf.GGUFReader(path)
    return int(sum(int(t.n_bytes) for t in r.tensors))


def bench_llamacpp(model, threads, prompt_tokens, gen_tokens, reps):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model, n_ctx=prompt_tokens + gen_tokens + 16,
                          n_threads=threads, n_threads_batch=threads, n_batch=512,
                          verbose=False)
    rng = np.random.default_rng(7)
    prompt = [int(x) for x in rng.integers(1000, 40000, prompt_tokens)]

    def once(gen):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for _ in range(gen):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            llm.eval([tok])
        return t1 - t0, time.perf_counter() - t1

    once(8)  # warm-up
    best_p, best_d, runs = 1e30, 1e30, []
    for _ in range(reps):
        p, d = once(gen_tokens)
        best_p, best_d = min(best_p, p), min(best_d, d)
        runs.append(d)
    return {"engine": "llama.cpp (llama-cpp-python " + llama_cpp.__version__ + ")",
            "threads": threads, "prefill_seconds": best_p,
            "prefill_tok_per_s": prompt_tokens / best_p, "decode_seconds": best_d,
            "decode_tok_per_s": gen_tokens / best_d,
            "decode_tok_per_s_median": gen_tokens / float(np.median(runs))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dq-bench", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()

    load_before = os.getloadavg()  # the cores may be shared: say how busy they were
    print(f"dqserve: {a.prompt_tokens}-token prefill + {a.gen_tokens} decode steps ...", flush=True)
    cmd = [a.dq_bench, "--model", a.model, "--threads", str(a.threads), "--prompt-tokens",
           str(a.prompt_tokens), "--gen-tokens", str(a.gen_tokens), "--reps", str(a.reps)]
    # The fp32 reference beside the fast decode path (8-bit activations, integer dots), the
    # default.
    ours = json.loads(subprocess.check_output(cmd + ["--cpu-matmul", "exact"]))
    ours_q8 = json.loads(subprocess.check_output(cmd + ["--cpu-matmul", "q8"]))
    print("llama.cpp: same ...", flush=True)
    theirs = bench_llamacpp(a.model, a.threads, a.prompt_tokens, a.gen_tokens, a.reps)
    bw = memory_bandwidth()
    wb = weight_bytes(a.model)
    roofline = bw / wb
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {
        "benchmark": "cpu_vs_llamacpp", "date": datetime.datetime.utcnow().isoformat() + "Z",
        "commit": commit, "machine": machine(),
        "command": "bench/cpu.sh (python3 bench/cpu_vs_llamacpp.py " +
                   f"--model {a.model} --threads {a.threads} --prompt-tokens {a.prompt_tokens} "
                   f"--gen-tokens {a.gen_tokens} --reps {a.reps})",
        "model": os.path.basename(a.model), "weight_bytes": wb,
        "loadavg_before_after": [load_before, os.getloadavg()],
        "memory_bandwidth_bytes_per_s": bw,
        "decode_roofline_tok_per_s": roofline,
        "dqserve": ours, "dqserve_q8": ours_q8, "llamacpp": theirs,
        "ratio_prefill": ours["prefill_tok_per_s"] / theirs["prefill_tok_per_s"],
        "ratio_decode": ours["decode_tok_per_s"] / theirs["decode_tok_per_s"],
        "ratio_decode_q8": ours_q8["decode_tok_per_s"] / theirs["decode_tok_per_s"],
    }
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, "cpu_smollm2_vs_llamacpp")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=2)
    md = [f"# CPU: dqserve vs llama.cpp on {result['model']}", "",
          f"Machine: {result['machine']['cpu']}, {a.threads} threads; commit {commit}; "
          f"{result['date']}; load average (1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/"
          f"{load_before[2]:.2f} before, {result['loadavg_before_after'][1][0]:.2f} after.",
          f"Command: `{result['command']}`", "",
          "| engine | prefill tok/s (" + str(a.prompt_tokens) + " tokens) | decode tok/s | "
          "decode median tok/s | decode / roofline |", "|---|---|---|---|---|"]
    for r in (ours, ours_q8, theirs):
        md.append(f"| {r['engine']} | {r['prefill_tok_per_s']:.1f} | {r['decode_tok_per_s']:.1f}"
                  f" | {r['decode_tok_per_s_median']:.1f}"
                  f" | {100 * r['decode_tok_per_s'] / roofline:.0f} % |")
    md += ["", f"Ratios dqserve / llama.cpp: prefill {result['ratio_prefill']:.2f}x, decode "
           f"{result['ratio_decode']:.2f}x (q8 decode {result['ratio_decode_q8']:.2f}x; medians "
           f"{ours_q8['decode_tok_per_s_median'] / theirs['decode_tok_per_s_median']:.2f}x).",
           f"Decode roofline: {bw / 1e9:.1f} GB/s measured copy bandwidth / {wb / 1e6:.1f} MB "
           f"of weights per token = {roofline:.0f} tok/s."]
    with open(stem + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
