#!/usr/bin/env python3
"""Turns dq-bench-gpu's raw JSON into bench/results JSON (with machine, commit, command) and a
Markdown table, each figure beside its roofline and the same-machine peers from ANCHORS.md."""
import argparse
import json

PEERS = {
    "decode_hf_bf16_tok_s": 164,
    "decode_compiled_bf16_tok_s": 254,
    "decode_compiled_int4_tok_s": 333,
    "prefill_hf_bf16_ms": {512: 36, 2048: 45, 8192: 196},
}
TARGETS = {"bf16": 455, "int4": 1200, "int2": 1800, "lut2": 1800}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("raw")
    p.add_argument("--machine", required=True)
    p.add_argument("--commit", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--md", required=True)
    a = p.parse_args()
    raw = json.load(open(a.raw))
    result = {"machine": a.machine, "commit": a.commit, "command": a.command,
              "model": raw.get("model"), "peers": PEERS, "targets_batch1_tok_s": TARGETS,
              "roofline": "decode: weight bytes read per step / 4.3 TB/s; prefill: linear FLOPs / "
                          "cuBLASLt peak (bf16 0.79, fp8 1.40 PFLOP/s) + attention FLOPs / 0.79",
              "runs": raw["runs"]}
    json.dump(result, open(a.json, "w"), indent=2)
    lines = [f"# CUDA backend on {a.machine}: Qwen3-4B shape, random weights",
             "", f"commit `{a.commit}`, `{a.command}`", "",
             "## Decode (tokens/s; roofline = weight bytes per step / 4.3 TB/s)", "",
             "| format | MiB read/step | roofline b=1 | b=1 | % | b=4 | b=8 | target b=1 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in raw["runs"]:
        if r.get("phase") != "decode":
            if "error" in r:
                lines.append(f"| {r['format']} | error: {r['error']} | | | | | | |")
            continue
        d = {x["batch"]: x for x in r["decode"]}
        def tps(b):
            return f"{d[b]['tokens_per_second']:.0f}" if b in d else "-"
        frac = d[1]["fraction_of_roofline"] * 100 if 1 in d else 0
        lines.append(f"| {r['format']} ({r['compute']}) | {r['decode_bytes_per_step'] / 2**20:.0f} | "
                     f"{r['roofline_tokens_per_second_batch1']:.0f} | {tps(1)} | {frac:.0f}% | "
                     f"{tps(4)} | {tps(8)} | {TARGETS.get(r['format'], '')} |")
    lines += ["", "Same machine: HF transformers bf16 164 tok/s; compiled PyTorch bf16 254, int4 333.",
              "", "## Prefill (ms for one prompt; floor = FLOPs at cuBLASLt peak)", "",
              "| format | tokens | ms | floor ms | TFLOP/s | HF bf16 ms |", "|---|---|---|---|---|---|"]
    for r in raw["runs"]:
        if r.get("phase") != "prefill":
            continue
        for x in r["prefill"]:
            hf = PEERS["prefill_hf_bf16_ms"].get(x["tokens"], "")
            lines.append(f"| {r['format']} ({r['compute']}) | {x['tokens']} | {x['ms']:.1f} | "
                         f"{x['floor_ms']:.1f} | {x['tflops']:.0f} | {hf} |")
    open(a.md, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
