"""dq-bench command line: `dq-bench serve`, a load generator for an OpenAI-compatible endpoint.
Exit status: 0 done; 1 an error (one `error: ...` line on stderr: bad input, unreachable
endpoint, no request succeeded); 130 Ctrl-C (the partial summary is printed and written)."""
import argparse
import http.client
import json
import os
import random
import signal
import sys
import time

from . import BenchError, report
from .endpoint import Endpoint, summarize
from .runner import SIGNALS, Interrupted, Run, request_body
from .stats import summarize as summarize_run
from .workload import (DatasetWorkload, LengthDist, PromptSizer, Request, SyntheticWorkload,
                       fit_sizer, words_text)

CALIBRATION_WORDS = (24, 120)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        sys.exit(1)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def positive_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a positive integer, got \"{s}\"") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"want a positive integer, got {v}")
    return v


def positive_float(s):
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a positive number, got \"{s}\"") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"want a positive number, got {s}")
    return v


def int_list(s):
    try:
        levels = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated integers, got \"{s}\"") \
            from None
    if not levels or any(v < 1 for v in levels):
        raise argparse.ArgumentTypeError(f"want positive integers, got \"{s}\"")
    return levels


def no_answer(ep, e):
    reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return BenchError(f"cannot reach the endpoint {ep.base}: {reason} (is the server up? "
                      f"`dqserve up` serves on http://127.0.0.1:8000)")


def probe(ep):
    """/v1/models (and /health when there is one) -> (models answer, health answer or None)."""
    try:
        status, _, raw = ep.call("GET", "/v1/models", timeout=min(ep.timeout, 15.0))
    except (OSError, http.client.HTTPException) as e:
        raise no_answer(ep, e) from None
    if status == 401:
        raise BenchError(f"{ep.base} wants an API key: put it in the environment variable "
                         f"named by --api-key-env (default DQ_API_KEY)")
    if status != 200:
        raise BenchError(f"GET {ep.base}/v1/models answered HTTP {status}: {summarize(raw)} "
                         f"(is this an OpenAI-compatible endpoint?)")
    try:
        models = json.loads(raw)
        if not isinstance(models.get("data"), list):
            raise ValueError
    except (ValueError, AttributeError):
        raise BenchError(f"GET {ep.base}/v1/models did not answer an OpenAI model list: "
                         f"{summarize(raw)}") from None
    health = None
    try:
        status, _, raw = ep.call("GET", "/health", timeout=10.0)
        if raw:
            health = json.loads(raw)
    except (OSError, http.client.HTTPException, ValueError):
        pass
    return models, health


def pick_model(models, name):
    entries = [m for m in models["data"] if isinstance(m, dict) and m.get("id")]
    if not entries:
        raise BenchError("the endpoint serves no model (/v1/models is empty)")
    if name is None:
        return entries[0]
    for m in entries:
        if m["id"] == name:
            return m
    raise BenchError(f"--model {name}: not served here; served: "
                     f"{', '.join(m['id'] for m in entries)}")


def calibrate(ep, model, chat, args):
    """Fits prompt_tokens = overhead + tokens_per_word * words on the endpoint itself, with two
    short non-streamed requests shaped like the real ones (so a field the endpoint refuses, such
    as ignore_eos, fails here with its message)."""
    points = []
    path = "/v1/chat/completions" if chat else "/v1/completions"
    for words in CALIBRATION_WORDS:
        rng = random.Random(f"dq-bench-calibration:{args.seed}:{words}")
        body = request_body(Request(-1, words_text(rng, words), 1, None), model, chat, args)
        body["stream"] = False
        del body["stream_options"]
        try:
            status, _, raw = ep.call("POST", path, body)
        except (OSError, http.client.HTTPException) as e:
            raise no_answer(ep, e) from None
        if status != 200:
            hint = " (if it does not know ignore_eos, add --no-ignore-eos)" \
                if "ignore_eos" in summarize(raw) else ""
            raise BenchError(f"POST {ep.base}{path} answered HTTP {status}: {summarize(raw)}"
                             f"{hint}")
        try:
            pt = json.loads(raw)["usage"]["prompt_tokens"]
        except (ValueError, KeyError, TypeError):
            log(f"dq-bench: the endpoint reports no usage.prompt_tokens; prompts are sized at "
                f"--tokens-per-word {args.tokens_per_word}")
            return PromptSizer(args.tokens_per_word), []
        points.append((words, pt))
    return fit_sizer(points), points


def scrape(ep, args):
    return None if args.no_metrics else ep.metrics()


def check_args(args):
    if args.max_concurrency is not None and args.rate is None:
        raise BenchError("--max-concurrency goes with --rate (with --concurrency the "
                         "concurrency is fixed already)")
    if args.arrivals != "poisson" and args.rate is None:
        raise BenchError("--arrivals goes with --rate")
    if args.num_requests is None and args.duration is None:
        args.num_requests = 100
    if args.warmup < 0:
        raise BenchError("--warmup must be >= 0")
    if args.temperature < 0:
        raise BenchError("--temperature must be >= 0")
    for name in ("slo_ttft_ms", "slo_tpot_ms"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise BenchError(f"--{name.replace('_', '-')} must be > 0")
    if args.out and os.path.isdir(args.out):
        raise BenchError(f"--out {args.out} is a directory; give a file name (results.json)")


def modes(args):
    if args.sweep_concurrency:
        return [{"concurrency": c} for c in args.sweep_concurrency]
    if args.concurrency:
        return [{"concurrency": args.concurrency}]
    return [{"rate": args.rate, "arrivals": args.arrivals,
             "max_concurrency": args.max_concurrency}]


def cmd_serve(args):
    check_args(args)
    chat = args.chat
    input_dist = LengthDist(args.input_len_dist, args.input_len, "--input-len")
    output_dist = LengthDist(args.output_len_dist, args.output_len, "--output-len")
    dataset = DatasetWorkload(args.dataset, output_dist, args.seed) if args.dataset else None
    if dataset is not None and chat and any(not isinstance(p, str) for p, _ in dataset.items):
        raise BenchError(f"--dataset {args.dataset}: token-id prompts need the completions API "
                         f"(drop --chat)")
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    ep = Endpoint(args.endpoint, api_key=key, timeout=args.timeout)

    started_at = time.time()
    models, health = probe(ep)
    entry = pick_model(models, args.model)
    model = entry["id"]
    ctx = entry.get("max_model_len")
    if dataset is None and isinstance(ctx, int) and input_dist.max() + output_dist.max() > ctx:
        log(f"dq-bench: warning: the longest requests ({input_dist.max()} + "
            f"{output_dist.max()} tokens) may not fit the context ({ctx}); they will fail")
    points = []
    if dataset is not None:
        workload = dataset
    else:
        if args.no_calibrate:
            sizer = PromptSizer(args.tokens_per_word)
        else:
            sizer, points = calibrate(ep, model, chat, args)
            if sizer.overhead + 1 > input_dist.mean():
                log(f"dq-bench: warning: the endpoint adds {sizer.overhead:.0f} tokens of its own "
                    f"to every prompt (chat template); --input-len {input_dist.spec_str()} is "
                    f"shorter, so prompts will be longer than asked")
        workload = SyntheticWorkload(args.seed, input_dist, output_dist, sizer)
    meta = {"endpoint": ep.base, "api": "chat" if chat else "completions", "model": model,
            "prefill_scheme": entry.get("dq_prefill_scheme"),
            "decode_scheme": entry.get("dq_decode_scheme"), "max_model_len": ctx}
    args_doc = {k: v for k, v in vars(args).items() if k not in ("func", "argv")}
    doc = {"tool": "dq-bench serve", "format_version": 1,
           "command": ["dq-bench", *args.argv],
           "args": args_doc, "started_at": report.iso(started_at), "finished_at": None,
           "machine": report.machine(), "git": report.git_info(), "meta": meta,
           "models": models, "health": health, "workload": workload.describe(),
           "calibration": [{"words": w, "prompt_tokens": t} for w, t in points],
           "interrupted": False, "runs": []}
    log(f"dq-bench: {ep.base} ({meta['api']}) model {model}, prefill "
        f"{meta['prefill_scheme'] or '?'}, decode {meta['decode_scheme'] or '?'}; "
        f"{report.workload_str(doc['workload'])}")

    if args.warmup:
        log(f"dq-bench: {args.warmup} warm-up request(s)")
        warm = Run(ep, _Offset(workload, 1 << 40), model, chat, args, {"concurrency": 1},
                   num_requests=args.warmup, label="warm-up", progress=False)
        bad = [r for r in warm.run() if not r["ok"]]
        if bad:
            raise BenchError(f"warm-up request failed: {bad[0]['kind']}: {bad[0]['error']}")

    SIGNALS.run_active = True  # from here on Ctrl-C ends with the partial results
    for mode in modes(args):
        if SIGNALS.interrupted:  # between two levels of a sweep
            doc["interrupted"] = True
            break
        label = report.mode_str(mode)
        before = scrape(ep, args)
        run = Run(ep, workload, model, chat, args, mode, num_requests=args.num_requests,
                  duration=args.duration, label=label, progress=not args.quiet)
        try:
            records = run.run()
        except Interrupted as e:
            records = e.records
            doc["interrupted"] = True
        after = scrape(ep, args) if not doc["interrupted"] else None
        result = {"mode": mode, "num_requests": args.num_requests, "duration": args.duration,
                  "started_at": report.iso(run.started_at),
                  "finished_at": report.iso(run.finished_at),
                  "summary": summarize_run(records, args.slo_ttft_ms, args.slo_tpot_ms),
                  "metrics": report.metrics_delta(before, after), "requests": records}
        doc["runs"].append(result)
        print(report.summary_table(result, meta), flush=True)
        if doc["interrupted"]:
            break
    doc["finished_at"] = report.iso(time.time())
    doc["interrupted"] = doc["interrupted"] or SIGNALS.interrupted
    if len(doc["runs"]) > 1:
        print()
        print(report.markdown(doc), end="", flush=True)
    if args.out:
        md = report.write(doc, args.out)
        log(f"dq-bench: results in {args.out} (+ {md})")
    if doc["interrupted"]:
        log("error: interrupted; the summary above covers the requests that finished")
        return 130
    for r in doc["runs"]:
        s = r["summary"]
        if s["completed"] == 0:
            kinds = ", ".join(f"{k} {v}" for k, v in s["errors"].items()) or "none sent"
            first = next((q["error"] for q in r["requests"] if q.get("error")), None)
            raise BenchError(f"no request succeeded at {report.mode_str(r['mode'])} ({kinds})"
                             + (f"; first error: {first}" if first else ""))
        if (s.get("itl_zero_fraction") or 0) > 0.1:
            log(f"dq-bench: warning: at {report.mode_str(r['mode'])}, "
                f"{100 * s['itl_zero_fraction']:.0f}% of token gaps are 0 (chunks arrived "
                f"together): the client may be saturated and ITL understated; see "
                f"docs/benchmarking.md")
        if s["failed"] or s["rejected"]:
            kinds = ", ".join(f"{k} {v}" for k, v in s["errors"].items())
            log(f"dq-bench: warning: at {report.mode_str(r['mode'])}, {s['failed']} failed and "
                f"{s['rejected']} rejected with 429 ({kinds})")
    return 0


class _Offset:
    """A workload whose request indices are shifted (warm-up prompts differ from the run's)."""

    def __init__(self, workload, offset):
        self.workload = workload
        self.offset = offset

    def request(self, i):
        r = self.workload.request(i + self.offset)
        r.index = i
        return r


def build_parser():
    p = Parser(prog="dq-bench", description="Benchmarks of a dqserve deployment (or any "
               "OpenAI-compatible endpoint).")
    sub = p.add_subparsers(dest="cmd", parser_class=Parser)
    s = sub.add_parser("serve", help="load generator: TTFT, TPOT, ITL, E2E, throughput, "
                       "goodput at a concurrency or an arrival rate",
                       description="Streams requests to /v1/completions (or "
                       "/v1/chat/completions with --chat) and measures each one.")
    s.add_argument("--endpoint", required=True, help="http://HOST:PORT (with or without /v1)")
    s.add_argument("--model", help="model to request (default: the first in /v1/models)")
    s.add_argument("--chat", action="store_true",
                   help="/v1/chat/completions (chat template applied by the server) instead of "
                   "/v1/completions")
    load = s.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=positive_int,
                      help="closed loop: this many users, each sends its next request when its "
                      "last one ends")
    load.add_argument("--rate", type=positive_float,
                      help="open loop: requests per second, whatever the answers")
    load.add_argument("--sweep-concurrency", type=int_list, metavar="N1,N2,...",
                      help="one closed-loop run per level, e.g. 1,2,4,8: one JSON, one "
                      "Markdown table")
    s.add_argument("--arrivals", choices=("poisson", "fixed"), default="poisson",
                   help="with --rate: exponential gaps (default) or equal gaps")
    s.add_argument("--max-concurrency", type=positive_int,
                   help="with --rate: at most this many requests in flight (later arrivals "
                   "wait)")
    stop = s.add_mutually_exclusive_group()
    stop.add_argument("--num-requests", type=positive_int,
                      help="requests per run (default 100)")
    stop.add_argument("--duration", type=positive_float,
                      help="seconds of sending per run (requests in flight then finish)")
    s.add_argument("--input-len", type=positive_int, default=512,
                   help="prompt tokens (default 512; the mean of the fixed distribution)")
    s.add_argument("--input-len-dist", default="fixed", metavar="DIST",
                   help="fixed (default), uniform:LO,HI or normal:MEAN,STD")
    s.add_argument("--output-len", type=positive_int, default=128,
                   help="tokens to generate, sent as max_tokens (default 128)")
    s.add_argument("--output-len-dist", default="fixed", metavar="DIST",
                   help="fixed (default), uniform:LO,HI or normal:MEAN,STD")
    s.add_argument("--dataset", metavar="FILE.jsonl",
                   help="prompts from a file: lines {\"prompt\": ..., \"max_tokens\": N} "
                   "(max_tokens optional), in order, repeated as needed")
    s.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let the model stop at EOS (default: ignore_eos, so each request "
                   "generates exactly max_tokens); actual lengths come from usage either way")
    s.add_argument("--temperature", type=float, default=0.0, help="default 0 (greedy)")
    s.add_argument("--seed", type=int, default=0,
                   help="prompts, lengths, arrivals and request seeds (default 0)")
    s.add_argument("--tokens-per-word", type=positive_float, default=1.0,
                   help="prompt sizing when not calibrated (default 1.0)")
    s.add_argument("--no-calibrate", action="store_true",
                   help="do not measure tokens per word on the endpoint (two 1-token requests "
                   "before the run)")
    s.add_argument("--warmup", type=int, default=0, metavar="N",
                   help="requests sent (one at a time) and discarded before the runs")
    s.add_argument("--slo-ttft-ms", type=float, help="goodput SLO on TTFT")
    s.add_argument("--slo-tpot-ms", type=float, help="goodput SLO on TPOT")
    s.add_argument("--out", metavar="RESULTS.json",
                   help="write every figure and per-request record here (+ RESULTS.md)")
    s.add_argument("--no-metrics", action="store_true",
                   help="do not scrape /metrics before and after each run")
    s.add_argument("--no-retry-wait", dest="retry_wait", action="store_false",
                   help="closed loop: a user whose request got 429 sends its next one at once "
                   "(default: it first waits Retry-After, at most 10 s)")
    s.add_argument("--timeout", type=positive_float, default=600.0,
                   help="seconds a request may go without data (default 600)")
    s.add_argument("--api-key-env", default="DQ_API_KEY",
                   help="environment variable holding the API key (default DQ_API_KEY)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    s.set_defaults(func=cmd_serve)
    return p


def _interrupt(signum, frame):
    """During a run: ask it to stop (it cancels what is in flight and returns what finished);
    otherwise, or on a second signal, stop at once."""
    if SIGNALS.run_active and not SIGNALS.interrupted:
        SIGNALS.interrupted = True
        return
    raise KeyboardInterrupt


def main(argv=None):
    # Ctrl-C and SIGTERM both end a run with its partial summary; SIGINT is installed even when
    # inherited as ignored (a background job of a non-interactive shell), so `kill -INT` works.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    p = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    args.argv = argv
    if not getattr(args, "func", None):
        p.print_help(sys.stderr)
        return 1
    try:
        return args.func(args)
    except BenchError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
