"""Checks of a dq-bench serve results file for tests/e2e/bench_serve_test.sh:
    check_results.py CHECK RESULTS.json [ARGS...]
prints `ok: ...` / `FAIL: ...` lines, exits 1 when a check failed."""
import json
import math
import sys

failures = 0
LENGTH = 'dq_requests_total{outcome="length"}'
REJECTED = 'dq_requests_total{outcome="rejected"}'


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
    print(f"{'ok' if cond else 'FAIL'}: {msg}", flush=True)
    return cond


def monotone(summary):
    """min <= p50 <= p90 <= p99 <= max, mean inside [min, max], for every latency figure."""
    bad = []
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        d = summary[key]
        chain = [d["min"], d["p50"], d["p90"], d["p99"], d["max"]]
        if any(v is None for v in chain) or any(a > b for a, b in zip(chain, chain[1:])) or \
                not d["min"] <= d["mean"] <= d["max"]:
            bad.append(f"{key} {d}")
    return bad


def check_main(doc, n, input_len, output_len):
    """The plain run: n requests at concurrency 2, every one a success of output_len tokens."""
    check(len(doc["runs"]) == 1 and doc["runs"][0]["mode"] == {"concurrency": 2},
          f"one run at concurrency 2: {[r['mode'] for r in doc['runs']]}")
    run = doc["runs"][0]
    s, recs = run["summary"], run["requests"]
    check((s["completed"], s["failed"], s["rejected"], s["cancelled"]) == (n, 0, 0, 0),
          f"{n} successes, no failure: {s['completed']} / {s['failed']} / {s['rejected']} / "
          f"{s['cancelled']} ({s['errors']})")
    check(sorted(r["index"] for r in recs) == list(range(n)), "one record per request")
    check(all(r["ok"] and r["ttft_s"] > 0 and r["tpot_s"] > 0 and r["e2e_s"] > r["ttft_s"]
              for r in recs), "every request: TTFT > 0, TPOT > 0, E2E > TTFT")
    check(all(r["usage"] and r["output_tokens"] == output_len == r["max_tokens"] and
              r["finish_reason"] == "length" for r in recs),
          f"every request generated exactly {output_len} tokens (usage, ignore_eos, finish "
          f"reason length): {[r['output_tokens'] for r in recs]}")
    check(all(1 <= r["chunks"] <= r["output_tokens"] and len(r["itl_s"]) == r["chunks"] - 1
              for r in recs), "content chunks <= usage tokens; one ITL per gap between chunks")
    check(all(math.isclose(r["tpot_s"], (r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1),
                           rel_tol=1e-3) for r in recs), "TPOT = (E2E - TTFT) / (tokens - 1)")
    pts = [r["prompt_tokens"] for r in recs]
    check(all(abs(p - input_len) <= 0.25 * input_len for p in pts),
          f"prompt tokens within 25% of {input_len} (calibrated sizing): {pts}")
    bad = monotone(s)
    check(not bad, f"percentiles monotone: {bad or 'ttft, tpot, itl, e2e'}")
    check(s["output_tokens"] == n * output_len and
          math.isclose(s["output_throughput"] * s["duration_s"], n * output_len, rel_tol=1e-6)
          and s["request_throughput"] > 0 and s["total_token_throughput"] >
          s["output_throughput"], f"throughputs consistent: {s['request_throughput']:.3f} "
          f"req/s, {s['output_throughput']:.1f} out tok/s, {s['total_token_throughput']:.1f} "
          f"tok/s over {s['duration_s']:.2f} s")
    m = run["metrics"]
    c = (m or {}).get("counters", {})
    gen, length = c.get("dq_generation_tokens_total"), c.get(LENGTH)
    check(m is not None and gen == s["output_tokens"] and length == n and
          c.get("dq_prompt_tokens_total") == sum(pts),
          f"/metrics deltas agree with the client: generated {gen}, finished by length "
          f"{length}, prompt tokens {c.get('dq_prompt_tokens_total')} vs {sum(pts)}")
    check(m is not None and m["server"].get("ttft_ms_mean", 0) > 0 and
          m["server"]["ttft_ms_mean"] <= s["ttft_ms"]["mean"] * 1.05 + 5,
          f"server-side TTFT mean <= client-side: {(m or {}).get('server', {}).get('ttft_ms_mean')}"
          f" vs {s['ttft_ms']['mean']:.1f} ms")
    model = (doc["models"].get("data") or [{}])[0]
    check(model.get("dq_prefill_scheme") and model.get("dq_decode_scheme") and
          doc["meta"]["model"] == model.get("id"),
          f"/v1/models answer with both phases' formats: {model.get('dq_prefill_scheme')}, "
          f"{model.get('dq_decode_scheme')}")
    check(doc["machine"]["hostname"] and doc["machine"]["nproc"] >= 1 and
          len((doc.get("git") or {}).get("commit") or "") == 40 and
          doc["command"][:2] == ["dq-bench", "serve"] and doc["started_at"] and
          doc["finished_at"] and doc["interrupted"] is False,
          "machine, git commit, command line, timestamps")
    check(s["goodput"] is not None and 0 <= s["goodput"]["requests"] <= n,
          f"goodput: {s['goodput']}")


def check_sweep(doc, levels):
    got = [r["mode"].get("concurrency") for r in doc["runs"]]
    check(got == levels, f"one run per level: {got}")
    check(all(r["summary"]["completed"] == r["num_requests"] and not monotone(r["summary"])
              for r in doc["runs"]), "every level: all requests succeeded, percentiles monotone")
    check(doc["meta"]["api"] == "chat", "chat API")


def check_rejected(doc, n):
    s = doc["runs"][0]["summary"]
    rej = [r for r in doc["runs"][0]["requests"] if r["kind"] == "rejected"]
    check(s["rejected"] > 0 and s["failed"] == 0 and s["completed"] + s["rejected"] == n,
          f"429s counted as rejected, not failed: {s['completed']} ok, {s['rejected']} "
          f"rejected, {s['failed']} failed")
    check(all(r["http_status"] == 429 and str(r.get("retry_after") or "").isdigit()
              for r in rej), "every rejected request carries its Retry-After")
    c = (doc["runs"][0]["metrics"] or {}).get("counters", {})
    check(c.get(REJECTED) == s["rejected"],
          f"the router counted the same rejections: {c.get(REJECTED)}")


def check_rate(doc, rate, n):
    starts = [r["start_s"] for r in doc["runs"][0]["requests"]]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    check(len(starts) == n and all(abs(g - 1 / rate) < 0.5 / rate for g in gaps),
          f"fixed arrivals every {1 / rate:.2f} s: gaps {[round(g, 3) for g in gaps]}")
    check(doc["runs"][0]["mode"] == {"rate": rate, "arrivals": "fixed", "max_concurrency": None},
          f"mode {doc['runs'][0]['mode']}")


def check_duration(doc, seconds):
    recs = doc["runs"][0]["requests"]
    check(doc["runs"][0]["num_requests"] is None and recs and
          all(r["start_s"] < seconds for r in recs) and
          doc["runs"][0]["summary"]["completed"] == len(recs),
          f"--duration {seconds}: {len(recs)} requests, all sent within {seconds} s, all ok")


def check_interrupted(doc):
    s = doc["runs"][0]["summary"]
    check(doc["interrupted"] is True and s["completed"] >= 1 and s["failed"] == 0 and
          s["completed"] + s["cancelled"] == len(doc["runs"][0]["requests"]),
          f"interrupted run saved: {s['completed']} completed, {s['cancelled']} cancelled")


def main():
    what, path, *rest = sys.argv[1:]
    with open(path) as f:
        doc = json.load(f)

    def nums():
        return [float(x) if "." in x else int(x) for x in rest]
    {"main": lambda: check_main(doc, *nums()),
     "sweep": lambda: check_sweep(doc, [int(x) for x in rest[0].split(",")]),
     "rejected": lambda: check_rejected(doc, *nums()),
     "rate": lambda: check_rate(doc, *nums()),
     "duration": lambda: check_duration(doc, *nums()),
     "interrupted": lambda: check_interrupted(doc)}[what]()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
