"""Fidelity of an endpoint against a reference endpoint serving the same model (same tokenizer)
in another format: the text is cut into windows, each window is teacher-forced through both
with POST /v1/completions {"prompt": window, "max_tokens": 1, "echo": true, "logprobs": K}, and
the prompt log-probabilities are compared position by position:
- top-1 agreement: the most likely next token is the same (exact);
- perplexity of each endpoint over the text (exact: the chosen tokens' log-probabilities);
- KL(reference || run), estimated from the top-K lists: the reference's K tokens plus one
  bucket for the rest of the vocabulary; a token missing from the run's top K gets at most the
  run's K-th probability. Coarse-graining can only lower a KL, so with K = 20 this is a close
  lower estimate of the full-vocabulary KL that `dq-tool fidelity` computes from logits.
Through an OpenAI-style API the prompt's log-probabilities come from the prefill pass, so on a
disaggregated deployment this measures the prefill worker's format (the decode format needs
`dq-tool fidelity`, which teacher-forces decode steps too).
Resumable like `run`: one JSONL line per finished window."""
import hashlib
import json
import math
import os
import re

from . import EvalError, stats
from .client import HttpError, Malformed, Unreachable
from .runner import load_results, now, write_json

FLOOR = 1e-10


def windows(text, words, max_windows=None):
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    out = []
    for i in range(0, len(spans), words):
        chunk = spans[i:i + words]
        if len(chunk) < max(8, words // 4):
            break
        out.append(text[chunk[0][0]:chunk[-1][1]])
        if max_windows and len(out) >= max_windows:
            break
    return out


def kl_topk(ref_top, run_top):
    """KL(P || Q) over P's top tokens plus a tail bucket; both are {token: logprob} dicts."""
    P = {t: math.exp(v) for t, v in ref_top.items()}
    Q = {t: math.exp(v) for t, v in run_top.items()}
    missing = [t for t in P if t not in Q]
    q_floor = min(Q.values()) if Q else FLOOR
    q_rest = max(0.0, 1.0 - sum(Q.values()))
    q_missing = min(q_floor, q_rest / len(missing)) if missing else 0.0
    q = {t: Q.get(t, q_missing) for t in P}
    kl = 0.0
    for t, p in P.items():
        if p > 0:
            kl += p * math.log(p / max(q[t], FLOOR))
    p_tail = max(0.0, 1.0 - sum(P.values()))
    q_tail = max(FLOOR, 1.0 - sum(q.values()))
    if p_tail > 1e-12:
        kl += p_tail * math.log(p_tail / q_tail)
    return max(0.0, kl)


def argmax(d):
    return max(d.items(), key=lambda kv: kv[1])[0] if d else None


def parse_echo(resp):
    try:
        lp = resp["choices"][0]["logprobs"]
        tokens, lps, tops = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise Malformed("echo response without choices[0].logprobs.{tokens,token_logprobs,"
                        "top_logprobs}") from None
    pt = (resp.get("usage") or {}).get("prompt_tokens")
    n = pt if isinstance(pt, int) and 0 < pt <= len(tokens) else len(tokens) - 1
    return tokens[:n], lps[:n], tops[:n]


def compare(ref_resp, run_resp):
    rt, rl, rtop = parse_echo(ref_resp)
    tt, tl, ttop = parse_echo(run_resp)
    if rt != tt:
        raise Malformed(f"the endpoints tokenize the text differently ({len(rt)} vs {len(tt)} "
                        f"tokens): fidelity needs the same tokenizer")
    kl, top1, nll, ref_nll = [], [], [], []
    for i in range(1, len(rt)):
        a, b = rtop[i], ttop[i]
        if not isinstance(a, dict) or not isinstance(b, dict) or rl[i] is None or tl[i] is None:
            continue
        kl.append(kl_topk(a, b))
        top1.append(1.0 if argmax(a) == argmax(b) else 0.0)
        nll.append(-float(tl[i]))
        ref_nll.append(-float(rl[i]))
    return {"kl": kl, "top1": top1, "nll": nll, "ref_nll": ref_nll}


def summarize(records, seed=0):
    groups = [r for r in records if r.get("kl")]
    if not groups:
        return None
    kl = [r["kl"] for r in groups]
    nll = [r["nll"] for r in groups]
    ref_nll = [r["ref_nll"] for r in groups]
    top1 = [v for r in groups for v in r["top1"]]
    k, klo, khi = stats.bootstrap_ci(kl, seed=seed)
    ppl_stat = (lambda v: math.exp(stats.mean(v)))
    p, plo, phi = stats.bootstrap_ci(nll, stat=ppl_stat, seed=seed + 1)
    rp, rplo, rphi = stats.bootstrap_ci(ref_nll, stat=ppl_stat, seed=seed + 2)
    t = sum(top1) / len(top1)
    return {"windows": len(groups), "positions": len(top1), "kl": k, "kl_ci95": [klo, khi],
            "top1": t, "top1_ci95": list(stats.wilson(sum(top1), len(top1))),
            "ppl": p, "ppl_ci95": [plo, phi], "ref_ppl": rp, "ref_ppl_ci95": [rplo, rphi]}


def run_fidelity(client, ref_client, model, ref_model, text_path, out_dir, words=200,
                 max_windows=None, top_k=20, log=print):
    try:
        with open(text_path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise EvalError(f"cannot read --text {text_path}: {e.strerror}") from None
    wins = windows(text, words, max_windows)
    if not wins:
        raise EvalError(f"{text_path} is too short for one window of {words} words")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "fidelity.jsonl")
    done = load_results(path, warn=log)
    records = []
    failed = 0
    with open(path, "a", encoding="utf-8") as f:
        for i, w in enumerate(wins):
            fp = hashlib.sha1(f"{top_k}\n{w}".encode()).hexdigest()[:16]
            key = f"window-{i}"
            if key in done and done[key].get("fp") == fp:
                records.append(done[key])
                continue
            resps, err = [], None
            for c, m in ((ref_client, ref_model), (client, model)):
                body = {"prompt": w, "max_tokens": 1, "temperature": 0, "echo": True,
                        "logprobs": top_k}
                if m:
                    body["model"] = m
                try:
                    resps.append(c.json("POST", "/v1/completions", body))
                except (HttpError, Unreachable, Malformed) as e:
                    log(f"window {i}: {c.base}: {e}")
                    resps, err = None, e
                    break
            if resps is None:
                failed += 1
                if isinstance(err, Unreachable):
                    raise EvalError(f"window {i}: no answer from {err}; finished windows are "
                                    f"kept, rerun to resume") from None
                continue
            try:
                rec = compare(*resps)
            except Malformed as e:
                log(f"window {i}: {e}")
                failed += 1
                continue
            rec.update({"key": key, "fp": fp, "finished": now()})
            f.write(json.dumps(rec) + "\n")
            f.flush()
            records.append(rec)
            log(f"window {i + 1}/{len(wins)}: {len(rec['kl'])} positions, mean KL "
                f"{stats.mean(rec['kl']):.4f}")
    summary = summarize(records)
    if summary is None:
        raise EvalError("no window could be compared (see the messages above)")
    result = {"endpoint": client.base, "model": model, "reference": ref_client.base,
              "reference_model": ref_model, "text": text_path, "window_words": words,
              "top_logprobs": top_k, "failed_windows": failed, "summary": summary,
              "created": now()}
    write_json(os.path.join(out_dir, "fidelity.json"), result)
    s = summary
    md = ("# dq-eval fidelity\n\n"
          f"Run: {client.base} ({model}); reference: {ref_client.base} ({ref_model}); text "
          f"`{text_path}` in {s['windows']} windows of {words} words, {s['positions']} "
          f"positions, top-{top_k} log-probabilities.\n\n"
          "| KL (nats) [95 % CI] | top-1 agreement % [95 % CI] | ppl [95 % CI] | reference ppl |\n"
          "|---|---|---|---|\n"
          f"| {s['kl']:.4f} [{s['kl_ci95'][0]:.4f}, {s['kl_ci95'][1]:.4f}] | "
          f"{100 * s['top1']:.1f} [{100 * s['top1_ci95'][0]:.1f}, {100 * s['top1_ci95'][1]:.1f}]"
          f" | {s['ppl']:.3f} [{s['ppl_ci95'][0]:.3f}, {s['ppl_ci95'][1]:.3f}] | "
          f"{s['ref_ppl']:.3f} |\n")
    with open(os.path.join(out_dir, "fidelity.md"), "w", encoding="utf-8") as fo:
        fo.write(md)
    return result, md
