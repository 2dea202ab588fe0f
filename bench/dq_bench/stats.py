"""Per-run figures from per-request records: throughput, latency percentiles, goodput."""
import math

PERCENTILES = (50, 90, 99)


def percentile(values, p):
    """The p-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default, so figures compare with vLLM's benchmark_serving). NaN for no values."""
    if not values:
        return float("nan")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside 0..100")
    s = sorted(values)
    pos = (len(s) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def describe(values, scale=1.0):
    """{n, mean, p50, p90, p99, min, max} of values * scale (None everywhere for no values, so
    the JSON stays valid)."""
    if not values:
        return {"n": 0, "mean": None, **{f"p{p}": None for p in PERCENTILES}, "min": None,
                "max": None}
    v = [x * scale for x in values]
    out = {"n": len(v), "mean": sum(v) / len(v)}
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(v, p)
    out["min"] = min(v)
    out["max"] = max(v)
    return out


def tpot(record):
    """(e2e - TTFT) / (output tokens - 1), or None with fewer than two tokens."""
    n = record.get("output_tokens") or 0
    if n < 2 or record.get("ttft_s") is None or record.get("e2e_s") is None:
        return None
    return (record["e2e_s"] - record["ttft_s"]) / (n - 1)


def meets_slo(record, slo_ttft_ms, slo_tpot_ms):
    if not record.get("ok"):
        return False
    if slo_ttft_ms is not None and record["ttft_s"] * 1e3 > slo_ttft_ms:
        return False
    t = record.get("tpot_s")
    if slo_tpot_ms is not None and t is not None and t * 1e3 > slo_tpot_ms:
        return False
    return True


def summarize(records, slo_ttft_ms=None, slo_tpot_ms=None):
    """Figures of one run. Duration runs from the first request sent to the last one finished
    (every outcome); throughputs count successful requests only. Latencies in ms."""
    done = [r for r in records if r.get("kind") != "cancelled"]
    ok = [r for r in done if r.get("ok")]
    rejected = [r for r in done if r.get("kind") == "rejected"]
    failed = [r for r in done if not r.get("ok") and r.get("kind") != "rejected"]
    errors = {}
    for r in failed + rejected:
        errors[r["kind"]] = errors.get(r["kind"], 0) + 1
    if done:
        t0 = min(r["start_s"] for r in done)
        t1 = max(r["start_s"] + (r.get("e2e_s") or 0.0) for r in done)
        duration = max(t1 - t0, 1e-9)
    else:
        duration = 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    in_tok = sum(r.get("prompt_tokens") or 0 for r in ok)
    out_tok = sum(r.get("output_tokens") or 0 for r in ok)
    itl = [x for r in ok for x in r.get("itl_s") or ()]
    s = {
        "requests": len(records),
        "completed": len(ok),
        "failed": len(failed),
        "rejected": len(rejected),
        "cancelled": len(records) - len(done),
        "errors": dict(sorted(errors.items())),
        "duration_s": duration,
        "request_throughput": per_s(len(ok)),
        "output_throughput": per_s(out_tok),
        "total_token_throughput": per_s(in_tok + out_tok),
        "input_tokens": in_tok,
        "output_tokens": out_tok,
        "input_tokens_mean": in_tok / len(ok) if ok else None,
        "output_tokens_mean": out_tok / len(ok) if ok else None,
        # Little's law: the number of requests in flight on average, as the server saw them.
        "mean_in_flight": per_s(sum(r.get("e2e_s") or 0.0 for r in done)),
        "ttft_ms": describe([r["ttft_s"] for r in ok], 1e3),
        "tpot_ms": describe([r["tpot_s"] for r in ok if r.get("tpot_s") is not None], 1e3),
        "itl_ms": describe(itl, 1e3),
        # Gaps of exactly 0: several token chunks parsed from one socket read, i.e. they queued
        # up before the client read them (a saturated client or a server that batches writes).
        "itl_zero_fraction": sum(1 for x in itl if x == 0.0) / len(itl) if itl else None,
        "e2e_ms": describe([r["e2e_s"] for r in ok], 1e3),
        "goodput": None,
    }
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        good = sum(1 for r in ok if meets_slo(r, slo_ttft_ms, slo_tpot_ms))
        s["goodput"] = {"slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms,
                        "requests": good, "requests_per_s": per_s(good),
                        "fraction": good / len(done) if done else None}
    return s
