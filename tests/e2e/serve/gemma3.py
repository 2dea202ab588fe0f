"""A tiny random Gemma 3 (sandwich norms, GeGLU, sliding-window layers of 8 positions) served
disaggregated on the CPU, prefill and decode workers over tcp: greedy output equals the
single-process `dqserve generate` token for token, on prompts longer than the window, and the
decode worker's KV blocks come back."""
import os

from serve_lib import (BIN, Deployment, check, chat, finish, generate_cli, run_main, wait_until,
                       worker_gauge)

GEMMA3 = os.path.join(os.path.dirname(BIN), "tiny-gemma3")
PROMPTS = ["Write a short story about a robot who learns to paint, and the colors it finds.",
           "List three facts about the moon, then explain tides to a child in two sentences."]
N = 40


def main():
    references = [generate_cli(GEMMA3, p, N) for p in PROMPTS]
    with Deployment(GEMMA3, threads=1) as dep:
        start = worker_gauge(dep.port, "dq_worker_free_kv_blocks", "decode")
        for prompt, reference in zip(PROMPTS, references):
            status, body = chat(dep.port, prompt, N)
            got = body["choices"][0]["message"]["content"] if status == 200 else body
            prompt_tokens = body.get("usage", {}).get("prompt_tokens", 0)
            check(got == reference and prompt_tokens > 8,
                  f"Gemma 3 across PD == dqserve generate ({prompt_tokens} prompt tokens, "
                  f"window 8)")
            if got != reference:
                print(f"  reference: {reference!r}\n  served:    {got!r}")
        back = wait_until(lambda: worker_gauge(dep.port, "dq_worker_free_kv_blocks", "decode")
                          == start, 5)
        check(back, "decode KV blocks back to their start value")
    finish()


if __name__ == "__main__":
    run_main(main, log_tails=True)
