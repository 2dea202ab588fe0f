"""dq-eval command line: run | report | fidelity | list-tasks.
Exit status: 0 done; 1 an error (one `error: ...` line on stderr: bad input, unreachable
endpoint, items that got no answer; finished items are kept and a rerun resumes); 130 Ctrl-C."""
import argparse
import os
import sys

from . import EvalError, deployment, report
from .client import Client
from .fidelity import run_fidelity
from .runner import Runner
from .tasks import GROUPS, TASKS, Options, resolve

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"error: {message} (see {self.prog} --help)\n")
        sys.exit(1)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def make_client(url, args, what="--endpoint"):
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    try:
        return Client(url, api_key=key, timeout=args.timeout, retries=args.retries,
                      backoff=args.backoff, log=log if args.verbose else (lambda m: None))
    except ValueError as e:
        raise EvalError(f"{what}: {e}") from None


def parse_data(pairs):
    out = {}
    for p in pairs or []:
        name, sep, path = p.partition("=")
        if not sep or not name or not path:
            raise EvalError(f"--data wants TASK=PATH, got \"{p}\"")
        if name not in TASKS:
            raise EvalError(f"--data names an unknown task \"{name}\" (see dq-eval list-tasks)")
        out[name] = os.path.abspath(path)
    return out


def add_client_args(p):
    p.add_argument("--api-key-env", default="DQ_API_KEY",
                   help="environment variable holding the API key (default DQ_API_KEY)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--retries", type=int, default=5,
                   help="retries of a request on 429 / 5xx / no answer (default 5)")
    p.add_argument("--backoff", type=float, default=0.5,
                   help="first retry delay in seconds, doubled each retry (default 0.5)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every retry")


def cmd_run(args):
    tasks = resolve(args.tasks.split(","))  # bad names fail before anything else
    data = parse_data(args.data)
    for t in tasks:
        if t.needs_data and t.name not in data:
            raise EvalError(f"task {t.name} reads its items from a JSONL file: give --data "
                            f"{t.name}=PATH")
    if args.limit is not None and args.limit < 1:
        raise EvalError("--limit must be at least 1")
    if not 256 <= args.length <= 131072:
        raise EvalError("--length must be between 256 and 131072 tokens")
    opts = Options(seed=args.seed, length=args.length, tokens_per_word=args.tokens_per_word,
                   api=args.api, max_tokens=args.max_tokens, data=data)
    for t in tasks:  # a malformed task file fails before the endpoint is touched
        t.items(opts, args.limit)
    client = make_client(args.endpoint, args)
    models = deployment.probe(client)
    entry = deployment.pick_model(models, args.model)
    opts.model = entry.get("id")
    opts.context = entry.get("max_model_len") if isinstance(entry.get("max_model_len"), int) \
        else None
    meta = {"label": args.label, "prefill_format": args.prefill_format,
            "decode_format": args.decode_format, "memory_gib": args.memory_gib,
            "bpw_prefill": args.bpw_prefill, "bpw_decode": args.bpw_decode}
    runner = Runner(client, tasks, opts, args.out, limit=args.limit,
                    concurrency=args.concurrency, max_failures=args.max_failures,
                    progress=not args.quiet, log=log, meta=meta)
    log(f"dq-eval: {client.base} model {entry.get('id')} (prefill "
        f"{entry.get('dq_prefill_scheme') or args.prefill_format or 'unknown'}, decode "
        f"{entry.get('dq_decode_scheme') or args.decode_format or 'unknown'}); tasks "
        f"{','.join(t.name for t in tasks)}; results in {args.out}")
    inv = runner.run(entry, deployment.health(client))
    if not args.no_report:
        md, backend = report.write_report([args.out], args.out)
        if not args.quiet:
            print(md)
        log(f"dq-eval: report in {os.path.join(args.out, 'report.md')} (+ report.json, "
            f"score_vs_bpw.png via {backend})")
    if inv["status"] == "interrupted":
        log("error: interrupted; finished items are saved, rerun the same command to resume")
        return 130
    if inv["status"] != "complete":
        reason = runner.abort_reason or f"{len(runner.failures)} items got no usable answer"
        raise EvalError(f"{reason}; {inv['done_after']} items are saved in {args.out}, rerun the "
                        f"same command to resume")
    return 0


def cmd_report(args):
    out = args.out or (args.runs[0] if len(args.runs) == 1 else None)
    if out is None:
        raise EvalError("several run directories: give --out DIR for the combined report")
    md, backend = report.write_report(args.runs, out, title=args.title)
    print(md)
    log(f"dq-eval: report in {os.path.join(out, 'report.md')} (+ report.json, score_vs_bpw.png "
        f"via {backend})")
    return 0


def cmd_fidelity(args):
    text = args.text or os.path.join(REPO, "tests", "data", "fidelity_text.txt")
    if not 1 <= args.top_logprobs <= 20:
        raise EvalError("--top-logprobs must be 1..20")
    client = make_client(args.endpoint, args)
    ref = make_client(args.reference, args, "--reference")
    m = deployment.pick_model(deployment.probe(client), args.model).get("id")
    rm = deployment.pick_model(deployment.probe(ref), args.reference_model).get("id")
    _, md = run_fidelity(client, ref, m, rm, text, args.out, words=args.window_words,
                         max_windows=args.windows, top_k=args.top_logprobs, log=log)
    print(md)
    return 0


def cmd_list_tasks(args):
    for name, t in TASKS.items():
        data = " (needs --data)" if t.needs_data else ""
        print(f"{name:22} {t.family:15} {t.description}{data}")
    print()
    for g, names in GROUPS.items():
        print(f"{g:22} group: {', '.join(names)}")
    return 0


def build_parser():
    p = Parser(prog="dq-eval", description="Accuracy evaluation of an OpenAI-compatible "
               "endpoint: decode-heavy and prefill-heavy tasks, log-likelihood multiple choice, "
               "fidelity against a reference endpoint; a report per deployment.")
    sub = p.add_subparsers(dest="cmd", parser_class=Parser)
    r = sub.add_parser("run", help="run tasks against an endpoint (resumable)")
    r.add_argument("--endpoint", required=True, help="http://HOST:PORT (with or without /v1)")
    r.add_argument("--tasks", required=True, help="comma-separated task names or groups")
    r.add_argument("--out", required=True, help="run directory (results, manifest, report)")
    r.add_argument("--limit", type=int, help="items per task (default: all / 200 generated)")
    r.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    r.add_argument("--seed", type=int, default=1234, help="item generation and request seed")
    r.add_argument("--length", type=int, default=1024,
                   help="prefill-heavy prompt length in tokens (default 1024)")
    r.add_argument("--tokens-per-word", type=float, default=1.3,
                   help="tokens per whitespace word, for length control (default 1.3)")
    r.add_argument("--api", choices=("chat", "completions"), default="chat",
                   help="chat (template applied by the server) or completions (base models)")
    r.add_argument("--max-tokens", type=int, help="override each task's generation budget")
    r.add_argument("--data", action="append", metavar="TASK=PATH",
                   help="JSONL items of a file task (gsm8k, mmlu-pro, mc)")
    r.add_argument("--model", help="model name to request (default: the first served)")
    r.add_argument("--label", help="deployment name in the report")
    r.add_argument("--prefill-format", help="prefill format when /v1/models does not say")
    r.add_argument("--decode-format", help="decode format when /v1/models does not say")
    r.add_argument("--memory-gib", type=float, help="device memory to report (default: the "
                   "weight files of the workers, when readable here)")
    r.add_argument("--bpw-prefill", type=float, help="bits per weight of the prefill format")
    r.add_argument("--bpw-decode", type=float, help="bits per weight of the decode format")
    r.add_argument("--max-failures", type=int, default=3,
                   help="stop after this many items get no answer after retries (default 3)")
    r.add_argument("--no-report", action="store_true", help="do not write the report")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no table")
    add_client_args(r)
    r.set_defaults(func=cmd_run)
    rp = sub.add_parser("report", help="the report of one or more run directories")
    rp.add_argument("runs", nargs="+", help="run directories (one per deployment)")
    rp.add_argument("--out", help="where to write report.md / .json / .png (default: the run "
                    "directory when there is one)")
    rp.add_argument("--title", default="dq-eval report")
    rp.set_defaults(func=cmd_report)
    f = sub.add_parser("fidelity", help="KL / top-1 / perplexity against a reference endpoint")
    f.add_argument("--endpoint", required=True)
    f.add_argument("--reference", required=True, help="the reference endpoint (same tokenizer)")
    f.add_argument("--out", required=True)
    f.add_argument("--text", help="text file (default tests/data/fidelity_text.txt)")
    f.add_argument("--window-words", type=int, default=200)
    f.add_argument("--windows", type=int, help="at most this many windows")
    f.add_argument("--top-logprobs", type=int, default=20)
    f.add_argument("--model")
    f.add_argument("--reference-model")
    add_client_args(f)
    f.set_defaults(func=cmd_fidelity)
    lt = sub.add_parser("list-tasks", help="the tasks and groups")
    lt.set_defaults(func=cmd_list_tasks)
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help(sys.stderr)
        return 1
    try:
        return args.func(args)
    except EvalError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:  # `dq-eval list-tasks | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
