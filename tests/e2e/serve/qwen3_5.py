"""A tiny random Qwen3.5 (Gated DeltaNet + gated attention hybrid): the single-process
`dqserve generate` gives transformers' greedy continuation (tests/golden/model/tiny_qwen3_5.json)
through the chat template, and the prefill and decode workers refuse the model with a clear error
instead of serving it from a zero recurrent state (the state is not shipped across PD yet)."""
import json
import os
import subprocess

from serve_lib import BIN, SRC, check, finish, free_port, generate_cli, run_main

QWEN3_5 = os.path.join(os.path.dirname(BIN), "tiny-qwen3_5")


def main():
    with open(os.path.join(SRC, "tests", "golden", "model", "tiny_qwen3_5.json")) as f:
        golden = {p["name"]: p for p in json.load(f)["prompts"]}
    ref = golden["chat_capital"]
    got = generate_cli(QWEN3_5, "What is the capital of France?", len(ref["greedy"]),
                       ["--no-think", "--temperature", "0"])
    check(got == ref["greedy_text"], "dqserve generate == transformers' 32-token greedy text")
    if got != ref["greedy_text"]:
        print(f"  transformers: {ref['greedy_text']!r}\n  generate:     {got!r}")
    for worker in ("dq-prefill", "dq-decode"):
        r = subprocess.run([os.path.join(BIN, worker), "--model", QWEN3_5, "--port",
                            str(free_port()), "--threads", "1"],
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        check(r.returncode != 0 and "recurrent state" in out and "dqserve generate" in out,
              f"{worker} refuses the hybrid model, saying why and what to run instead")
    finish()


if __name__ == "__main__":
    run_main(main)
