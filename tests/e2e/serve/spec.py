"""Speculative decoding in the serving path (docs/speculative.md, "Serving path"), on SmolLM2:
- `dqserve up` with `[decode] speculative = "ngram"` gives, greedy, exactly what `dqserve
  generate` gives and what a deployment without a drafter gives, token for token, on several
  prompts, one of them repetitive so that drafts are accepted;
- seeded sampling, a stop string, a small max_tokens and EOS end the stream exactly where plain
  decoding ends it; logprobs match;
- "speculative": false opts a request out (no speculation counters, same text); a bad value is
  a 400 naming the field;
- usage.speculative and the router's dq_spec_* counters agree (accepted <= drafted)."""
import tempfile
import threading

from serve_lib import (SMOL, Deployment, Up, check, chat, fail, finish,
                       generate_cli, metrics, metric_sum, post_json)

# SmolLM2 answers this with "1234567890123..." (one token per digit): the n-gram drafter's
# proposals are then mostly right.
REPETITIVE = "Count from 1 to 30 in words, separated by commas."
PROMPTS = [
    (REPETITIVE, 80),
    ("Write a short story about a robot who learns to paint.", 40),
    ("Repeat after me ten times: I will not talk in class.", 32),
]
SPEC_KEYS = ("dq_spec_drafted_tokens_total", "dq_spec_accepted_tokens_total",
             "dq_spec_steps_total")


def content(status, body):
    if status != 200:
        return f"<HTTP {status}: {body}>"
    return body["choices"][0]["message"]["content"]


def spec_metrics(port):
    m = metrics(port)
    return [metric_sum(m, k) for k in SPEC_KEYS]


def check_greedy(spec, plain):
    for prompt, n in PROMPTS:
        reference = generate_cli(SMOL, prompt, n)
        before = spec_metrics(spec)
        s_status, s_body = chat(spec, prompt, n)
        got = content(s_status, s_body)
        want = content(*chat(plain, prompt, n))
        label = prompt[:30]
        check(got == reference and got == want,
              f"greedy {label!r}: speculative == plain deployment == dqserve generate")
        if got != reference or got != want:
            print(f"  generate: {reference!r}\n  plain:    {want!r}\n  spec:     {got!r}")
        usage = s_body.get("usage", {}) if s_status == 200 else {}
        sp = usage.get("speculative")
        check(sp is not None and 0 <= sp["accepted_tokens"] <= sp["drafted_tokens"]
              and sp["steps"] >= 1, f"greedy {label!r}: usage.speculative {sp}")
        after = spec_metrics(spec)
        if sp is not None:
            delta = [a - b for a, b in zip(after, before)]
            want_delta = [sp["drafted_tokens"], sp["accepted_tokens"], sp["steps"]]
            check(delta == want_delta,
                  f"greedy {label!r}: /metrics grew by the request's counters {delta}")
        if prompt == REPETITIVE:
            check(sp is not None and sp["accepted_tokens"] > 0 and
                  sp["acceptance_length"] > 1.0,
                  f"repetitive prompt: drafts accepted ({sp})")


def check_seeded_and_stops(spec, plain):
    cases = [
        ("seeded", {"temperature": 0.8, "seed": 42, "top_p": 0.95}, 48),
        ("seeded + penalties", {"temperature": 1.0, "seed": 7, "frequency_penalty": 0.5}, 48),
        ("stop string inside a run", {"stop": ["0123456789012345"]}, 64),
        ("max_tokens inside a run", {}, 37),
        ("logprobs", {"logprobs": True, "top_logprobs": 2}, 24),
    ]
    for what, extra, n in cases:
        kw = {"temperature": 0, **extra}
        s_status, s_body = chat(spec, REPETITIVE, n, **kw)
        p_status, p_body = chat(plain, REPETITIVE, n, **kw)
        same = (s_status == p_status == 200 and content(s_status, s_body) ==
                content(p_status, p_body) and s_body["choices"][0]["finish_reason"] ==
                p_body["choices"][0]["finish_reason"] and s_body["usage"]["completion_tokens"]
                == p_body["usage"]["completion_tokens"])
        check(same, f"{what}: speculative == plain (text, finish_reason "
                    f"{s_body.get('choices', [{}])[0].get('finish_reason')}, tokens)")
        if not same:
            print(f"  plain: {content(p_status, p_body)!r}\n  spec:  {content(s_status, s_body)!r}")
        if what == "stop string inside a run":
            check(s_body["choices"][0]["finish_reason"] == "stop" and
                  content(s_status, s_body) == "123456789",
                  f"stop string: the stream ended on it ({content(s_status, s_body)!r})")
        if what == "max_tokens inside a run":
            check(s_body["usage"]["completion_tokens"] == n and
                  s_body["choices"][0]["finish_reason"] == "length", "max_tokens: cut at 37")
        if what == "logprobs" and same:
            a = [t["logprob"] for t in s_body["choices"][0]["logprobs"]["content"]]
            b = [t["logprob"] for t in p_body["choices"][0]["logprobs"]["content"]]
            want_n = p_body["usage"]["completion_tokens"]
            check(len(a) == len(b) == want_n and all(abs(x - y) < 1e-3 for x, y in zip(a, b)),
                  "logprobs: per-token logprobs agree with plain decoding")
    # EOS: a short answer ends by itself well before max_tokens.
    s = chat(spec, "What is 2 + 2? Answer with one number.", 100)
    p = chat(plain, "What is 2 + 2? Answer with one number.", 100)
    check(s[0] == 200 and content(*s) == content(*p) and s[1]["choices"][0]["finish_reason"] ==
          "stop" == p[1]["choices"][0]["finish_reason"] and s[1]["usage"]["completion_tokens"]
          == p[1]["usage"]["completion_tokens"] < 100, "EOS ends the stream where plain does")


def check_mixed_batch(spec, plain):
    """Speculating and opted-out sequences decoding in the same steps of one batch."""
    jobs = [(REPETITIVE, {"speculative": False}), (REPETITIVE, {}),
            ("Write a short story about a robot who learns to paint.", {}),
            ("Repeat after me ten times: I will not talk in class.", {"speculative": False})]
    got = [None] * len(jobs)

    def run(i):
        got[i] = content(*chat(spec, jobs[i][0], 40, **jobs[i][1]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = [content(*chat(plain, p, 40)) for p, _ in jobs]
    check(got == want, "4 concurrent requests (2 opted out) == plain decoding, one by one")


def check_opt_out_and_errors(spec, plain):
    before = spec_metrics(spec)
    status, body = chat(spec, REPETITIVE, 48, speculative=False)
    check(status == 200 and "speculative" not in body.get("usage", {}),
          f"speculative=false: no speculation in usage {body.get('usage')}")
    check(spec_metrics(spec) == before, "speculative=false: the dq_spec_* counters stand still")
    check(content(status, body) == content(*chat(plain, REPETITIVE, 48)),
          "speculative=false: same text as plain decoding")
    status, body = chat(spec, REPETITIVE, 8, speculative=True)
    check(status == 200 and "speculative" in body.get("usage", {}),
          "speculative=true: speculates (the default)")
    for bad in ("yes", 1, [True]):
        status, body = chat(spec, "hi", 4, speculative=bad)
        err = body.get("error", {}) if isinstance(body, dict) else {}
        check(status == 400 and err.get("param") == "speculative" and
              err.get("type") == "invalid_request_error" and "boolean" in err.get("message", ""),
              f"speculative={bad!r}: 400 naming the field ({status} {err})")
    status, body = post_json(spec, "/v1/completions", {"prompt": "hi", "max_tokens": 2,
                                                        "speculative": "no"})
    check(status == 400 and body.get("error", {}).get("param") == "speculative",
          "completions: a bad speculative value is a 400 too")
    m = metrics(spec)
    drafted, accepted, steps = (metric_sum(m, k) for k in SPEC_KEYS)
    check(steps > 0 and 0 < accepted <= drafted,
          f"/metrics: steps {steps}, drafted {drafted}, accepted {accepted}")


def main():
    work = tempfile.mkdtemp(prefix="dq-spec-")
    up = Up(work, "spec", SMOL, 'speculative = "ngram"\nspec_k = 4\n')
    try:
        with Deployment(SMOL) as plain:
            check_greedy(up.port, plain.port)
            check_seeded_and_stops(up.port, plain.port)
            check_mixed_batch(up.port, plain.port)
            check_opt_out_and_errors(up.port, plain.port)
            m = metrics(plain.port)
            check(metric_sum(m, "dq_spec_steps_total") == 0,
                  "a deployment without a drafter counts no speculation")
    except Exception as e:  # noqa: BLE001 - report, then let the log explain
        fail(f"{type(e).__name__}: {e}")
        print(up.output()[-4000:])
    finally:
        rc = up.stop()
    check(rc == 0, f"dqserve up stopped on SIGINT (exit {rc})")
    finish()


if __name__ == "__main__":
    main()
