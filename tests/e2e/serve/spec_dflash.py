"""The DFlash block drafter in the serving path (docs/speculative.md, "Serving path" and
"Disaggregation") on the tiny random Qwen3 and a random DFlash drafter made for it by
`dq-tool make-dflash`:
- colocated (`dqserve generate --speculative dflash`) greedy output equals plain output;
- `dqserve up` with [decode] speculative = "dflash": the prefill worker captures the target's
  hidden states, projects the drafter's context K/V and ships it with the target's KV
  (usage.speculative.drafter_prompt == "shipped", dq_spec_drafter_prompts_shipped_total);
  greedy output equals plain output and the same request with "speculative": false, token for
  token, also with the prompts decoded in one batch; drafted/accepted counters move;
- the same with the prompt prefilled in chunks (--token-budget 5): the same drafts;
- a prefill worker without the drafter, or with another DFlash drafter (another fingerprint):
  the decode worker recomputes the prompt's hidden states itself ("recomputed"), the same tokens,
  the logs say why; and every draft the decode worker proposes (its debug log) is the same as
  with the shipped context, so what was shipped is the context the drafter computes itself. (A
  random drafter almost never agrees with the random target, so acceptance counts cannot show
  that; the drafted tokens depend on the context, dflash_drafter_test checks that.)
- bad set-ups fail at start-up with a clear message: a drafter made for another target, dflash
  on cuda (both workers and the TOML)."""
import os
import re
import shutil
import subprocess
import tempfile
import threading

import spec_self
from serve_lib import (BIN, SRC, TINY, Deployment, Up, chat, check, finish, generate_cli,
                       run_main)
from spec_self import run_prompts

PROMPTS = [("Say hi to everyone in the room please.", 24), ("What is two plus two?", 16)]
spec_self.PROMPTS = PROMPTS  # run_prompts sends these
# The decode worker's debug line for each draft: position and tokens (request ids differ).
DRAFTS = re.compile(r"at (\d+) drafted \[([0-9,]*)\]")


def tool(*args):
    r = subprocess.run([os.path.join(BIN, "dq-tool"), *args], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"dq-tool {args[0]} failed: {r.stderr}")


def refuses(binary, args, want, label):
    """`binary args` exits non-zero at start-up and says `want`."""
    r = subprocess.run([os.path.join(BIN, binary), *args], capture_output=True, text=True,
                       timeout=300)
    out = r.stdout + r.stderr
    check(r.returncode != 0 and want in out, f"{label}: exits {r.returncode} saying {want!r} "
          f"({out.strip()[-300:]!r})")


def bad_setups(work, drafter, foreign):
    port = ["--port", "1"]
    refuses("dq-decode", ["--model", TINY, *port, "--speculative", "dflash", "--draft-weights",
                          foreign], "its hidden size is", "dq-decode, drafter of another target")
    refuses("dq-prefill", ["--model", TINY, *port, "--speculative", "dflash", "--draft-weights",
                           foreign], "its hidden size is", "dq-prefill, drafter of another target")
    refuses("dq-decode", ["--model", TINY, *port, "--speculative", "dflash"],
            "needs --draft-weights", "dq-decode --speculative dflash without weights")
    refuses("dq-prefill", ["--model", TINY, *port, "--speculative", "dflash", "--draft-weights",
                           drafter, "--draft-group-size", "32"], "no --draft-format/--draft-group",
            "dq-prefill --speculative dflash with a group size")


def per_request(log):
    """Each request's drafts (position, tokens) from the decode worker's debug log, in the order
    the requests first drafted."""
    drafts = {}
    for rid, at, tokens in re.findall(r"dq-decode: (\S+): at (\d+) drafted \[([0-9,]*)\]", log):
        drafts.setdefault(rid, []).append((at, tokens))
    return list(drafts.values())


def concurrent(port, references):
    """All prompts at once: they share decode steps (the capture's rows are per sequence), and
    each still gets plain decoding's tokens."""
    results = [None] * len(PROMPTS)

    def send(i):
        results[i] = chat(port, PROMPTS[i][0], PROMPTS[i][1])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (prompt, _), want, (status, body) in zip(PROMPTS, references, results):
        sp = body.get("usage", {}).get("speculative") or {} if status == 200 else {}
        check(status == 200 and body["choices"][0]["message"]["content"] == want and
              sp.get("drafted_tokens", 0) > 0 and sp.get("drafter_prompt") == "shipped",
              f"concurrent {prompt[:24]!r}: same text as without a drafter, drafted ({sp})")


def main():
    work = tempfile.mkdtemp(prefix="dq-spec-dflash-")
    drafter = os.path.join(work, "dflash")
    other = os.path.join(work, "dflash-other")
    tool("make-dflash", "--target", TINY, "--out", drafter, "--seed", "3")
    tool("make-dflash", "--target", TINY, "--out", other, "--seed", "4")
    target2 = os.path.join(work, "tiny-wide")
    tool("make-tiny", "--out", target2, "--hidden", "32", "--seed", "2", "--tokenizer",
         os.path.join(SRC, "tests/golden/tokenizer/qwen-style/tokenizer.json"),
         "--chat-template", os.path.join(SRC, "tests/golden/chat/qwen3_template.jinja"))
    foreign = os.path.join(work, "dflash-foreign")
    tool("make-dflash", "--target", target2, "--out", foreign)
    bad_setups(work, drafter, foreign)

    references = [generate_cli(TINY, p, n) for p, n in PROMPTS]
    for (p, n), r in zip(PROMPTS, references):
        spec = generate_cli(TINY, p, n, ["--speculative", "dflash", "--draft-weights", drafter])
        check(spec == r, f"colocated dqserve generate --speculative dflash {p[:24]!r} == plain")
    up = Up(work, "spec_dflash", TINY,
            f'speculative = "dflash"\nspec_k = 4\ndraft_weights = "{drafter}"\n')
    try:
        run_prompts(up.port, "dqserve up, shipped", "shipped", references, min_accepted=0)
    finally:
        check(up.stop() == 0, "dqserve up stopped cleanly")
    decode = ["--speculative", "dflash", "--spec-k", "4", "--draft-weights", drafter,
              "--log-level", "debug"]
    with Deployment(TINY, decode_args=decode,
                    prefill_args=["--speculative", "dflash", "--draft-weights", drafter]) as dep:
        run_prompts(dep.port, "workers, shipped", "shipped", references, min_accepted=0)
        shipped = DRAFTS.findall(dep.log("decode0"))
        alone = per_request(dep.log("decode0"))
        concurrent(dep.port, references)
        together = per_request(dep.log("decode0"))[len(alone):]
        ids = re.findall(r"dq-decode: (\S+): at \d+ drafted", dep.log("decode0"))[len(shipped):]
        switches = sum(a != b for a, b in zip(ids, ids[1:]))
        print(f"note: the concurrent requests' drafts alternate {switches} times in the log "
              "(> 1: they shared decode steps)")
        # The CPU kernels' results do not depend on the batch, so a sequence drafts the same
        # tokens whether it decodes alone or beside another (its own rows of the capture).
        check(sorted(together) == sorted(alone) and len(alone) == len(PROMPTS),
              f"decoded together, each request drafts what it drafted alone "
              f"({[len(d) for d in together]} vs {[len(d) for d in alone]} drafts)")
    check(len(shipped) > 0, f"the decode worker logged its {len(shipped)} drafts")
    # Prompts prefilled in chunks of 5 tokens (mid-block): the context is written chunk by chunk.
    with Deployment(TINY, decode_args=decode,
                    prefill_args=["--speculative", "dflash", "--draft-weights", drafter,
                                  "--token-budget", "5"]) as dep:
        run_prompts(dep.port, "shipped, chunked prefill", "shipped", references, min_accepted=0)
        got = DRAFTS.findall(dep.log("decode0"))
        check(got == shipped, f"shipped, chunked prefill: the same {len(got)} drafts as from one "
              f"pass ({len(shipped)})")
    cases = [("no drafter on prefill", [], "runs no drafter"),
             ("another dflash drafter on prefill", ["--speculative", "dflash", "--draft-weights",
                                                    other], "the decode worker drafts with weights")]
    for label, prefill_args, reason in cases:
        with Deployment(TINY, decode_args=decode, prefill_args=prefill_args) as dep:
            run_prompts(dep.port, label, "recomputed", references, min_accepted=0)
            got = DRAFTS.findall(dep.log("decode0"))
            check(got == shipped, f"{label}: the same {len(got)} drafts as with the shipped "
                  f"drafter context ({len(shipped)})")
            check(reason in dep.log("prefill0"), f"{label}: the prefill log says why ({reason})")
            check("computing the drafter's prompt KV here" in dep.log("decode0"),
                  f"{label}: the decode log says it computes the drafter's prompt KV")
    shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    run_main(main)
