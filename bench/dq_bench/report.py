"""What a run leaves behind: the summary table (stdout), the JSON file with every per-request
record, and a Markdown table beside it."""
import datetime
import json
import os
import platform
import socket
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(
        timespec="milliseconds") if t is not None else None


def machine():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "nproc": os.cpu_count(), "cpu": cpu,
            "platform": platform.platform(), "python": platform.python_version()}


def git_info(repo=REPO):
    def git(*a):
        r = subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None
    try:
        commit = git("rev-parse", "HEAD")
        if commit is None:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": commit, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return None


def metric_name(key):
    return key.split("{", 1)[0]


def metrics_delta(before, after):
    """Deltas of the dq_* counters and histogram sums/counts (buckets left out) between two
    /metrics scrapes, plus the server-side means they give. None without both scrapes."""
    if before is None or after is None:
        return None
    delta = {}
    for key, v in sorted(after.items()):
        name = metric_name(key)
        if not name.startswith("dq_") or name.endswith("_bucket"):
            continue
        if name.endswith("_total") or name.endswith("_sum") or name.endswith("_count"):
            delta[key] = v - before.get(key, 0.0)
    server = {}
    for short, hist in (("ttft_ms", "dq_time_to_first_token_seconds"),
                        ("tpot_ms", "dq_time_per_output_token_seconds"),
                        ("queue_ms", "dq_queue_time_seconds")):
        n = delta.get(hist + "_count")
        if n:
            server[short + "_mean"] = 1e3 * delta.get(hist + "_sum", 0.0) / n
    for short, name in (("prompt_tokens", "dq_prompt_tokens_total"),
                        ("generation_tokens", "dq_generation_tokens_total")):
        if name in delta:
            server[short] = delta[name]
    outcomes = {k.split('outcome="', 1)[1].split('"', 1)[0]: v for k, v in delta.items()
                if k.startswith("dq_requests_total{") and 'outcome="' in k and v}
    if outcomes:
        server["requests_by_outcome"] = outcomes
    return {"counters": delta, "server": server}


def _f(v, digits=2):
    if v is None or v != v:
        return "-"
    return f"{v:,.{digits}f}"


def slo_str(g):
    return " and ".join(x for x in (
        f"TTFT <= {g['slo_ttft_ms']:g} ms" if g["slo_ttft_ms"] is not None else "",
        f"TPOT <= {g['slo_tpot_ms']:g} ms" if g["slo_tpot_ms"] is not None else "") if x)


def mode_str(mode):
    if "concurrency" in mode:
        return f"concurrency {mode['concurrency']}"
    s = f"rate {mode['rate']:g}/s {mode['arrivals']}"
    if mode.get("max_concurrency"):
        s += f", max concurrency {mode['max_concurrency']}"
    return s


def summary_table(run, meta):
    """The readable summary of one run (stdout)."""
    s = run["summary"]
    w = 44
    lines = []
    title = f" dq-bench serve: {mode_str(run['mode'])} "
    lines.append(title.center(w + 32, "="))

    def row(k, v):
        lines.append(f"{k:<{w}}{v}")

    row("Endpoint", f"{meta['endpoint']} ({meta['api']})")
    row("Model", f"{meta['model']} (prefill {meta.get('prefill_scheme') or '?'}, decode "
                 f"{meta.get('decode_scheme') or '?'})")
    row("Requests: completed / failed / rejected", f"{s['completed']} / {s['failed']} / "
                                                   f"{s['rejected']}"
        + (f" (+{s['cancelled']} cancelled)" if s["cancelled"] else ""))
    if s["errors"]:
        row("Errors by kind", ", ".join(f"{k} {v}" for k, v in s["errors"].items()))
    row("Duration (s)", _f(s["duration_s"]))
    row("Request throughput (req/s)", _f(s["request_throughput"], 3))
    row("Output token throughput (tok/s)", _f(s["output_throughput"]))
    row("Total token throughput (tok/s)", _f(s["total_token_throughput"]))
    row("Input / output tokens (mean per request)", f"{_f(s['input_tokens_mean'], 1)} / "
                                                    f"{_f(s['output_tokens_mean'], 1)}")
    row("Mean requests in flight", _f(s["mean_in_flight"]))
    g = s.get("goodput")
    if g:
        row("Goodput (req/s)", f"{_f(g['requests_per_s'], 3)} ({g['requests']} requests meet "
                               f"{slo_str(g)})")
    server = (run.get("metrics") or {}).get("server") or {}
    if server.get("ttft_ms_mean") is not None:
        row("Server-side TTFT / TPOT / queue mean (ms)",
            f"{_f(server.get('ttft_ms_mean'))} / {_f(server.get('tpot_ms_mean'))} / "
            f"{_f(server.get('queue_ms_mean'))}")
    lines.append("-" * (w + 32))
    lines.append(f"{'(ms)':<12}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}{'max':>12}")
    for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"),
                      ("E2E", "e2e_ms")):
        d = s[key]
        lines.append(f"{name:<12}" + "".join(f"{_f(d[k]):>12}" for k in
                                             ("mean", "p50", "p90", "p99", "max")))
    lines.append("=" * (w + 32))
    return "\n".join(lines)


MD_COLUMNS = ("| load | ok / fail / 429 | req/s | out tok/s | total tok/s | TTFT p50 | TTFT p99 "
              "| TPOT p50 | TPOT p99 | ITL p50 | E2E p50 | E2E p99 | goodput req/s |")


def markdown(doc):
    """A short Markdown summary of every run in the document (latencies in ms)."""
    m = doc["meta"]
    lines = [f"# dq-bench serve: {m['model']}", "",
             f"- endpoint {m['endpoint']} ({m['api']}); prefill "
             f"`{m.get('prefill_scheme') or '?'}`, decode `{m.get('decode_scheme') or '?'}`",
             f"- workload: {workload_str(doc['workload'])}",
             f"- {doc['started_at']}; {doc['machine']['hostname']} "
             f"({doc['machine']['nproc']} CPUs); commit "
             f"{(doc.get('git') or {}).get('commit', 'unknown')[:12]}"
             + (" (dirty)" if (doc.get("git") or {}).get("dirty") else ""),
             f"- command: `{' '.join(doc['command'])}`"]
    g = next((r["summary"]["goodput"] for r in doc["runs"] if r["summary"].get("goodput")),
             None)
    if g:
        lines.append(f"- goodput: requests per second that meet {slo_str(g)}")
    if doc.get("interrupted"):
        lines.append("- **interrupted** (Ctrl-C): the last run is partial")
    lines += ["", MD_COLUMNS, "|" + "---|" * (MD_COLUMNS.count("|") - 1)]
    for r in doc["runs"]:
        s = r["summary"]
        gp = s.get("goodput")
        lines.append("| " + " | ".join([
            mode_str(r["mode"]), f"{s['completed']} / {s['failed']} / {s['rejected']}",
            _f(s["request_throughput"], 3), _f(s["output_throughput"], 1),
            _f(s["total_token_throughput"], 1), _f(s["ttft_ms"]["p50"], 1),
            _f(s["ttft_ms"]["p99"], 1), _f(s["tpot_ms"]["p50"], 1), _f(s["tpot_ms"]["p99"], 1),
            _f(s["itl_ms"]["p50"], 1), _f(s["e2e_ms"]["p50"], 1), _f(s["e2e_ms"]["p99"], 1),
            _f(gp["requests_per_s"], 3) if gp else "-"]) + " |")
    return "\n".join(lines) + "\n"


def workload_str(w):
    if w["kind"] == "dataset":
        return f"dataset {w['path']} ({w['lines']} prompts), output {w['output_len']} tokens"
    s = w["sizer"]
    return (f"synthetic prompts (seed {w['seed']}), input {w['input_len']} tokens, output "
            f"{w['output_len']} tokens; {s['tokens_per_word']} tokens/word + "
            f"{s['overhead_tokens']} ({s['source']})")


def write(doc, path):
    """Writes the JSON (atomically) and the Markdown beside it (same name, .md)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(doc) + "\n")
    os.replace(tmp, path)
    md = os.path.splitext(path)[0] + ".md"
    with open(md, "w") as f:
        f.write(markdown(doc))
    return md



def dumps(o, level=0, key=None):
    """JSON, indented, except that lists of scalars stay on one line and every per-request
    record ("requests") is one line: a file of thousands of requests stays greppable."""
    pad = " " * (level + 1)
    if isinstance(o, dict) and o:
        items = [f"{pad}{json.dumps(str(k))}: {dumps(v, level + 1, k)}" for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    if isinstance(o, list) and o:
        if key == "requests" or all(not isinstance(x, (dict, list)) for x in o):
            if key != "requests":
                return json.dumps(o, allow_nan=False)
            return "[\n" + ",\n".join(pad + json.dumps(r, separators=(",", ":"),
                                                       allow_nan=False) for r in o) + \
                "\n" + " " * level + "]"
        return "[\n" + ",\n".join(pad + dumps(x, level + 1) for x in o) + "\n" + \
            " " * level + "]"
    return json.dumps(o, allow_nan=False)
