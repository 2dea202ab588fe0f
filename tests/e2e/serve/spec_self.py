"""The self drafter across the prefill/decode split (docs/speculative.md, "Disaggregation"), on
the model named by argv[1] ("tiny": the tiny random Qwen3 fixture; "smol": SmolLM2):
- the decode worker drafts with the model quantized to int8; the prefill worker holds the same
  drafter, computes the prompt's drafter KV and ships it with the target's (usage.speculative.
  drafter_prompt == "shipped", dq_spec_drafter_prompts_shipped_total);
- greedy output equals non-speculative output token for token: `dqserve generate` without a
  drafter, and the same request with "speculative": false;
- drafted/accepted counters move (usage and /metrics);
- a prefill worker with another drafter (int4: another fingerprint) or none: the request still
  succeeds with the same tokens, the decode worker computes the drafter's prompt KV itself
  ("recomputed", dq_spec_drafter_prompts_recomputed_total), the logs say why; and every request
  accepts exactly as many drafts as with the shipped KV, so what was shipped is the KV the
  drafter computes itself (wrong KV would only lower acceptance, never change the tokens).
tiny runs through `dqserve up` (TOML [decode] speculative = "self"); smol through the workers."""
import sys
import tempfile

from serve_lib import (SMOL, TINY, Deployment, Up, check, chat, fail, finish,
                       generate_cli, metric_sum, metrics, ok)

KIND = sys.argv[1] if len(sys.argv) > 1 else "tiny"
MODEL = TINY if KIND == "tiny" else SMOL
GROUP = "32" if KIND == "tiny" else "64"
DRAFT = ["--draft-format", "int8", "--draft-group-size", GROUP]
OTHER_DRAFT = ["--draft-format", "int4", "--draft-group-size", "32"]
if KIND == "tiny":
    PROMPTS = [("Say hi to everyone in the room please.", 24), ("What is two plus two?", 16)]
else:
    PROMPTS = [("Count from 1 to 30 in words, separated by commas.", 40),
               ("Name three primary colors.", 20)]
SPEC_KEYS = ("dq_spec_drafted_tokens_total", "dq_spec_accepted_tokens_total",
             "dq_spec_steps_total", "dq_spec_drafter_prompts_shipped_total",
             "dq_spec_drafter_prompts_recomputed_total")


def counters(port):
    m = metrics(port)
    return [metric_sum(m, k) for k in SPEC_KEYS]


def run_prompts(port, label, source, references, min_accepted=1):
    """Sends every prompt (greedy); checks the text against the references and the drafter's
    prompt source; returns each request's accepted-draft count. `min_accepted`: the fewest
    accepted drafts over all prompts (0 for a random drafter that never agrees)."""
    before = counters(port)
    accepted = []
    for (prompt, n), want in zip(PROMPTS, references):
        status, body = chat(port, prompt, n)
        if status != 200:
            fail(f"{label} {prompt[:24]!r}: HTTP {status}: {body}")
            accepted.append(None)
            continue
        got = body["choices"][0]["message"]["content"]
        sp = body.get("usage", {}).get("speculative") or {}
        check(got == want, f"{label} {prompt[:24]!r}: same text as without a drafter "
              f"({got[:40]!r} vs {want[:40]!r})")
        check(sp.get("drafter_prompt") == source and sp.get("steps", 0) >= 1 and
              0 <= sp.get("accepted_tokens", -1) <= sp.get("drafted_tokens", -1),
              f"{label} {prompt[:24]!r}: usage.speculative {sp}")
        accepted.append(sp.get("accepted_tokens"))
        # The same request opted out: the same tokens with no drafter at all.
        status, plain = chat(port, prompt, n, speculative=False)
        check(status == 200 and plain["choices"][0]["message"]["content"] == got and
              "speculative" not in plain.get("usage", {}),
              f"{label} {prompt[:24]!r}: \"speculative\": false gives the same text")
    after = counters(port)
    delta = [a - b for a, b in zip(after, before)]
    drafted, acc, steps, shipped, recomputed = delta
    check(drafted > 0 and min_accepted <= acc <= drafted and steps > 0,
          f"{label}: /metrics drafted {drafted}, accepted {acc}, steps {steps}")
    check(acc == sum(a or 0 for a in accepted), f"{label}: /metrics accepted == usage sum")
    want_shipped = len(PROMPTS) if source == "shipped" else 0
    check(shipped == want_shipped and recomputed == len(PROMPTS) - want_shipped,
          f"{label}: drafter prompts shipped {shipped}, recomputed {recomputed}")
    return accepted


def main():
    references = [generate_cli(MODEL, p, n) for p, n in PROMPTS]
    for (p, n), r in zip(PROMPTS, references):
        spec = generate_cli(MODEL, p, n, ["--speculative", "self", *DRAFT])
        check(spec == r, f"colocated dqserve generate --speculative self {p[:24]!r} == plain")
    work = tempfile.mkdtemp(prefix="dq-spec-self-")
    if KIND == "tiny":
        up = Up(work, "spec_self", MODEL, 'speculative = "self"\nspec_k = 4\n'
                f'draft_format = "int8"\ndraft_group_size = {GROUP}\n')
        try:
            shipped = run_prompts(up.port, "dqserve up, shipped", "shipped", references)
        finally:
            check(up.stop() == 0, "dqserve up stopped cleanly")
    else:
        with Deployment(MODEL, decode_args=["--speculative", "self", "--spec-k", "4", *DRAFT],
                        prefill_args=DRAFT) as dep:
            shipped = run_prompts(dep.port, "shipped", "shipped", references)
    cases = [("another drafter on prefill", OTHER_DRAFT, "the decode worker drafts with weights"),
             ("no drafter on prefill", [], "runs no drafter")]
    if KIND != "tiny":
        cases = cases[:1]
    for label, prefill_args, reason in cases:
        with Deployment(MODEL, decode_args=["--speculative", "self", "--spec-k", "4", *DRAFT],
                        prefill_args=prefill_args) as dep:
            got = run_prompts(dep.port, label, "recomputed", references)
            check(got == shipped, f"{label}: accepted drafts per request {got} == with the "
                  f"shipped drafter KV {shipped}")
            check(reason in dep.log("prefill0"), f"{label}: the prefill log says why ({reason})")
            check("computing the drafter's prompt KV here" in dep.log("decode0"),
                  f"{label}: the decode log says it computes the drafter's prompt KV")
    finish()


if __name__ == "__main__":
    main()
