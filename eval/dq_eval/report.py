"""The report: per deployment (one run directory each) a row in the shape of the reference
paper's Table 1 (prefill format, decode format, device memory, prefill / decode speed, decode-
heavy score, prefill-heavy score), per-task details, as Markdown and JSON, plus a PNG of score
vs. bits per weight."""
import json
import os

from . import EvalError, plot, stats
from .deployment import pretty_scheme
from .runner import MANIFEST, RESULTS, load_results, read_json, write_json

FAMILIES = ("decode-heavy", "prefill-heavy", "log-likelihood", "multi-turn")


def load_run(run_dir):
    man = read_json(os.path.join(run_dir, MANIFEST))
    if man is None:
        raise EvalError(f"{run_dir} is not a dq-eval run directory (no {MANIFEST})")
    results = load_results(os.path.join(run_dir, RESULTS), warn=lambda m: None)
    fid = read_json(os.path.join(run_dir, "fidelity.json"))
    return man, list(results.values()), fid


def score_summary(recs):
    n = len(recs)
    s = sum(float(r.get("score") or 0.0) for r in recs)
    lo, hi = stats.wilson(s, n)
    out = {"n": n, "score": s / n if n else None, "ci95": [lo, hi] if n else None,
           "errors": sum(1 for r in recs if r.get("error"))}
    if any("acc_norm" in r for r in recs):
        s2 = sum(float(r.get("acc_norm") or 0.0) for r in recs)
        out["acc_norm"] = s2 / n if n else None
        out["acc_norm_ci95"] = list(stats.wilson(s2, n)) if n else None
    pts = [r["prompt_tokens"] for r in recs if isinstance(r.get("prompt_tokens"), int)]
    if pts:
        out["prompt_tokens_mean"] = sum(pts) / len(pts)
        out["prompt_tokens_max"] = max(pts)
    cts = [r["completion_tokens"] for r in recs if isinstance(r.get("completion_tokens"), int)]
    if cts:
        out["completion_tokens_mean"] = sum(cts) / len(cts)
    return out


def speeds(man, results):
    """Prefill speed = prompt tokens / (time to first token - queue time) and decode speed =
    1 / mean time per output token (one sequence's rate), from the deltas of the server's
    /metrics counters over every invocation of the run; without /metrics, a client-side
    estimate from the generation items (completion tokens / latency)."""
    d = {}
    for inv in man.get("invocations") or []:
        a, b = inv.get("metrics_start"), inv.get("metrics_end")
        if not a or not b:
            continue
        delta = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in b}
        if any(v < 0 for v in delta.values()):
            continue  # the server restarted during the invocation: counters were reset
        for k, v in delta.items():
            d[k] = d.get(k, 0.0) + v
    out = {"source": "server /metrics" if d else "client"}
    if d:
        ttft = d.get("dq_time_to_first_token_seconds_sum", 0.0) - \
            d.get("dq_queue_time_seconds_sum", 0.0)
        if ttft > 0 and d.get("dq_prompt_tokens_total"):
            out["prefill_tok_s"] = d["dq_prompt_tokens_total"] / ttft
        if d.get("dq_time_per_output_token_seconds_sum", 0) > 0:
            out["decode_tok_s"] = (d["dq_time_per_output_token_seconds_count"] /
                                   d["dq_time_per_output_token_seconds_sum"])
        out["generation_tokens"] = d.get("dq_generation_tokens_total")
        out["prompt_tokens"] = d.get("dq_prompt_tokens_total")
    else:
        gen = [r for r in results if r.get("family") != "log-likelihood" and
               r.get("completion_tokens") and r.get("latency_s")]
        if gen:
            out["decode_tok_s"] = (sum(r["completion_tokens"] for r in gen) /
                                   sum(r["latency_s"] for r in gen))
            out["note"] = "completion tokens / request latency (includes prefill)"
    return out


def summarize_run(run_dir):
    man, results, fid = load_run(run_dir)
    by_task = {}
    for r in results:
        by_task.setdefault(r.get("task"), []).append(r)
    tasks = {t: dict(score_summary(rs), family=rs[0].get("family")) for t, rs in
             sorted(by_task.items())}
    families = {}
    for fam in FAMILIES:
        recs = [r for r in results if r.get("family") == fam]
        if recs:
            families[fam] = score_summary(recs)
    mem = man.get("weight_memory_bytes") or {}
    mem_total = mem.get("total") or (sum(v for k, v in mem.items() if k in ("prefill", "decode"))
                                     or None)
    row = {
        "dir": os.path.abspath(run_dir),
        "label": man.get("label") or man.get("model"),
        "model": man.get("model"),
        "endpoint": man.get("endpoint"),
        "commit": man.get("commit"),
        "prefill_format": man.get("prefill_format"),
        "decode_format": man.get("decode_format"),
        "bits_per_weight": man.get("bits_per_weight") or {},
        "weight_memory_bytes": mem_total,
        "weight_memory": mem,
        "speed": speeds(man, results),
        "families": families,
        "tasks": tasks,
        "options": man.get("options"),
    }
    if fid:
        row["fidelity"] = fid.get("summary")
    return row


def pct(s):
    return "–" if s is None else f"{100 * s:.1f}"


def cell(summary):
    if not summary or summary.get("n", 0) == 0:
        return "not run"
    lo, hi = summary["ci95"]
    return f"{pct(summary['score'])} [{pct(lo)}, {pct(hi)}] (n={summary['n']})"


def fmt_mem(b):
    return "n/a" if not b else f"{b / 2 ** 20:.0f} MiB"


def fmt_speed(v):
    return "n/a" if v is None else f"{v:.1f}"


def markdown(rows, title="dq-eval report"):
    lines = [f"# {title}", "",
             "Scores in % with Wilson 95 % intervals and the item count. Decode-heavy: "
             "generation with chain of thought and answer extraction; prefill-heavy: RULER-style "
             "long prompts, string_match_all. Memory: the weight files of the prefill and the "
             "decode worker together. Speeds from the server's /metrics over the run (prefill: "
             "prompt tokens per second of time to first token less queueing; decode: one "
             "sequence's tokens per second).", "",
             "| deployment | prefill format | decode format | memory | prefill tok/s | decode "
             "tok/s | decode-heavy | prefill-heavy |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = r["speed"]
        lines.append(
            f"| {r['label']} | {pretty_scheme(r['prefill_format'])} | "
            f"{pretty_scheme(r['decode_format'])} | {fmt_mem(r['weight_memory_bytes'])} | "
            f"{fmt_speed(sp.get('prefill_tok_s'))} | {fmt_speed(sp.get('decode_tok_s'))} | "
            f"{cell(r['families'].get('decode-heavy'))} | "
            f"{cell(r['families'].get('prefill-heavy'))} |")
    lines += ["", "## Per task", "",
              "| deployment | task | family | n | score % [95 % CI] | acc_norm % | errors | "
              "mean prompt tokens |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for t, s in r["tasks"].items():
            lo, hi = s["ci95"]
            lines.append(
                f"| {r['label']} | {t} | {s['family']} | {s['n']} | {pct(s['score'])} "
                f"[{pct(lo)}, {pct(hi)}] | "
                f"{pct(s['acc_norm']) if s.get('acc_norm') is not None else ''} | "
                f"{s['errors']} | {s.get('prompt_tokens_mean', 0):.0f} |")
    fids = [r for r in rows if r.get("fidelity")]
    if fids:
        lines += ["", "## Fidelity against the reference endpoint", "",
                  "Teacher-forced prompt log-probabilities (`echo` + `logprobs`): the prompt is "
                  "scored by the prefill worker, so this is the prefill format's fidelity; "
                  "decode-side fidelity needs `dq-tool fidelity`. KL from the top-20 lists "
                  "(a lower estimate).", "",
                  "| deployment | positions | KL (nats) [95 % CI] | top-1 agreement % | ppl | "
                  "reference ppl |", "|---|---|---|---|---|---|"]
        for r in fids:
            f = r["fidelity"]
            lines.append(f"| {r['label']} | {f['positions']} | {f['kl']:.4f} "
                         f"[{f['kl_ci95'][0]:.4f}, {f['kl_ci95'][1]:.4f}] | "
                         f"{100 * f['top1']:.1f} | {f['ppl']:.3f} | {f['ref_ppl']:.3f} |")
    lines += ["", "Runs:", ""]
    for r in rows:
        lines.append(f"- {r['label']}: `{r['dir']}` — model {r['model']}, endpoint "
                     f"{r['endpoint']}, commit {r['commit']}, options {json.dumps(r['options'])}")
    return "\n".join(lines) + "\n"


def write_report(run_dirs, out_dir, title="dq-eval report"):
    rows = [summarize_run(d) for d in run_dirs]
    os.makedirs(out_dir, exist_ok=True)
    md = markdown(rows, title)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write(md)
    write_json(os.path.join(out_dir, "report.json"), {"deployments": rows})
    series = {"decode-heavy vs decode bits/weight": [], "prefill-heavy vs prefill bits/weight": []}
    for r in rows:
        bpw = r["bits_per_weight"]
        for fam, side, name in (("decode-heavy", "decode", "decode-heavy vs decode bits/weight"),
                                ("prefill-heavy", "prefill",
                                 "prefill-heavy vs prefill bits/weight")):
            s = r["families"].get(fam)
            if s and s["n"] and bpw.get(side):
                series[name].append((bpw[side], s["score"], s["ci95"][0], s["ci95"][1],
                                     r["label"]))
    png = os.path.join(out_dir, "score_vs_bpw.png")
    backend = plot.scatter(png, series, "bits per weight", "score")
    return md, backend
