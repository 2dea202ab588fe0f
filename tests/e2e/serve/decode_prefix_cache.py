"""Prefix caching on the decode worker (dq-decode --prefix-cache --assistant-kv), real processes
on the tiny Qwen3: two-turn conversations whose second turn repeats the first turn's prompt and
answer.
- "reuse": the second turn's Reserve leases the cached blocks of turn 1's prompt and answer (the
  KV decode wrote), the prefill worker ships only the blocks after them: fewer KV bytes cross
  than without the cache, the decode worker's prefix hits count them;
- "reprefill": only turn 1's prompt blocks are reused, the answer's KV is shipped again;
- both answer exactly what a deployment without the cache answers (greedy; on the CPU both
  phases run the same weights and kernels, so decode-written and prefill-written KV agree);
- afterwards the decode worker's free blocks are back to their start value (cached blocks are
  evictable), and with a pool smaller than the conversations the cache evicts and loses nothing;
- with two decode workers the router sends each second turn to the worker that served the first
  (its prefix affinity), so the prefix hits are those of a single worker.
"""
import time

from serve_lib import (TINY, Deployment, check, finish, metric_sum, metrics, post_json,
                       served_name, wait_until, worker_gauge)

TURNS = [("Remember these words: apple, river, candle, stone, violin. Say OK.",
          "Which word came third?"),
         ("My name is Ada and I live in a small town by the sea. Greet me.",
          "Where do I live?"),
         ("List three colours of the rainbow.", "And two more?")]


def converse(port, first, second, tokens=24):
    """Both turns; returns (answer 1, answer 2, turn 2's KV bytes shipped, its prompt tokens)."""
    name = served_name(port)
    turn1 = [{"role": "user", "content": first}]
    s, out = post_json(port, "/v1/chat/completions",
                       {"model": name, "messages": turn1, "max_tokens": tokens, "temperature": 0})
    check(s == 200, f"turn 1 of {first[:20]!r}: HTTP {s}")
    a1 = out["choices"][0]["message"]["content"] if s == 200 else ""
    turn2 = turn1 + [{"role": "assistant", "content": a1}, {"role": "user", "content": second}]
    before = metric_sum(metrics(port), "dq_kv_transfer_bytes_total")
    s, out = post_json(port, "/v1/chat/completions",
                       {"model": name, "messages": turn2, "max_tokens": tokens, "temperature": 0})
    check(s == 200, f"turn 2 of {first[:20]!r}: HTTP {s}")
    shipped = metric_sum(metrics(port), "dq_kv_transfer_bytes_total") - before
    a2 = out["choices"][0]["message"]["content"] if s == 200 else ""
    return a1, a2, shipped, out.get("usage", {}).get("prompt_tokens", 0)


def run(label, decode_args, decode=1):
    with Deployment(TINY, decode=decode, decode_args=decode_args) as dep:
        start = worker_gauge(dep.port, "dq_worker_free_kv_blocks", "decode")
        results = [converse(dep.port, a, b) for a, b in TURNS]
        back = wait_until(lambda: worker_gauge(dep.port, "dq_worker_free_kv_blocks",
                                               "decode") == start, 10)
        check(back, f"{label}: the decode worker's free blocks are back at {start}")
        time.sleep(0.6)  # a health round (every 200 ms) after the last request
        hits = worker_gauge(dep.port, "dq_worker_prefix_hit_blocks_total", "decode")
    return results, hits


def main():
    plain, plain_hits = run("no cache", [])
    check(plain_hits == 0, f"no cache: no prefix hits ({plain_hits})")
    reuse, reuse_hits = run("reuse", ["--prefix-cache", "--assistant-kv", "reuse"])
    reprefill, reprefill_hits = run("reprefill", ["--prefix-cache", "--assistant-kv",
                                                  "reprefill"])
    for i, (p, u, r) in enumerate(zip(plain, reuse, reprefill)):
        check(u[:2] == p[:2] and r[:2] == p[:2],
              f"conversation {i}: both policies answer both turns as without the cache "
              f"({u[1][:30]!r}, {r[1][:30]!r} vs {p[1][:30]!r})")
        check(u[2] <= r[2] < p[2] and u[2] < p[2],
              f"conversation {i}: turn 2 shipped {u[2]:.0f} bytes with reuse, {r[2]:.0f} with "
              f"reprefill, {p[2]:.0f} without the cache")
    check(reuse_hits > reprefill_hits > 0,
          f"decode prefix hits: reuse {reuse_hits:.0f} > reprefill {reprefill_hits:.0f} > 0")
    # Two decode workers: the router sends each turn 2 to the worker that served its turn 1
    # (PrefixAffinity), so the hits are those of one worker (round robin would halve them).
    two, two_hits = run("two decode workers", ["--prefix-cache", "--assistant-kv", "reuse"],
                        decode=2)
    check(two_hits == reuse_hits and [t[:2] for t in two] == [p[:2] for p in plain],
          f"two decode workers: {two_hits:.0f} prefix hits (one worker: {reuse_hits:.0f}), the "
          "same answers")
    # A pool of 16 blocks of 16 tokens: fewer than the conversations keep; it evicts, and every
    # request still succeeds with the same answers.
    small, _ = run("small pool", ["--prefix-cache", "--assistant-kv", "reuse",
                                  "--kv-capacity", "256"])
    check([s[:2] for s in small] == [p[:2] for p in plain],
          "small pool: every conversation answered as without the cache")
    finish()


if __name__ == "__main__":
    main()
