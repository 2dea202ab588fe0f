"""A tiny random Qwen3.5 (Gated DeltaNet + gated attention hybrid): the single-process
`dqserve generate` gives transformers' greedy continuation (tests/golden/model/tiny_qwen3_5.json),
and served across PD on the CPU over tcp (the recurrent state shipped as the lease's state slot
part) it equals `dqserve generate` token for token: short and multi-block prompts, streamed and
not, concurrent; the state bytes shipped are in /metrics; every way a request ends (finished,
the first token a stop, a killed decode worker) gives its state slots back; and what the state
cannot do yet (--prefix-cache, speculative decoding) is refused at start-up by name."""
import json
import os
import subprocess
import threading
import time

from serve_lib import (BIN, SRC, Deployment, busiest, check, chat, finish, free_port,
                       generate_cli, metrics, run_main, served_name, stream, wait_port,
                       wait_until, worker_gauge)

QWEN3_5 = os.path.join(os.path.dirname(BIN), "tiny-qwen3_5")
PROMPTS = ["What is the capital of France?",
           "Write a short story about a robot who learns to paint, and the colors it finds.",
           # Several 16-token KV blocks, and longer than one prefill chunk of the state's layers.
           " ".join(["List three facts about the moon, then explain tides to a child."] * 8)]
N = 24
TTL_MS = 3000


def golden():
    with open(os.path.join(SRC, "tests", "golden", "model", "tiny_qwen3_5.json")) as f:
        ref = {p["name"]: p for p in json.load(f)["prompts"]}["chat_capital"]
    got = generate_cli(QWEN3_5, "What is the capital of France?", len(ref["greedy"]),
                       ["--no-think", "--temperature", "0"])
    check(got == ref["greedy_text"], "dqserve generate == transformers' 32-token greedy text")
    if got != ref["greedy_text"]:
        print(f"  transformers: {ref['greedy_text']!r}\n  generate:     {got!r}")


def refusals():
    for worker, flags, what in (("dq-prefill", ["--prefix-cache"], "--prefix-cache"),
                                ("dq-decode", ["--prefix-cache"], "--prefix-cache"),
                                ("dq-decode", ["--speculative", "ngram"], "--speculative")):
        r = subprocess.run([os.path.join(BIN, worker), "--model", QWEN3_5, "--port",
                            str(free_port()), "--threads", "1", *flags],
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        check(r.returncode != 0 and what in out and "hybrid model" in out,
              f"{worker} {' '.join(flags)} refused on the hybrid model, by name")


def slots(dep, role):
    return worker_gauge(dep.port, "dq_worker_free_state_slots", role)


def state_bytes(dep):
    return metrics(dep.port).get("dq_state_transfer_bytes_total", 0.0)


def content(status, body):
    return body["choices"][0]["message"]["content"] if status == 200 else body


def streamed(port, name, prompt):
    status, events, _ = stream(port, "/v1/chat/completions",
                               {"model": name, "messages": [{"role": "user", "content": prompt}],
                                "max_tokens": N, "temperature": 0, "stream": True})
    text = ""
    for e in events:
        if e.startswith("data: {"):
            for c in json.loads(e[6:])["choices"]:
                text += c.get("delta", {}).get("content") or ""
    return status, text


def served_equal(dep, name, references):
    per_request = []
    for prompt, ref in zip(PROMPTS, references):
        before = state_bytes(dep)
        status, body = chat(dep.port, prompt, N)
        per_request.append(state_bytes(dep) - before)
        got = content(status, body)
        tokens = body.get("usage", {}).get("prompt_tokens", 0) if status == 200 else 0
        check(got == ref, f"across PD == dqserve generate ({tokens} prompt tokens)")
        if got != ref:
            print(f"  reference: {ref!r}\n  served:    {got!r}")
        status, text = streamed(dep.port, name, prompt)
        check(status == 200 and text == ref, f"streamed across PD == dqserve generate ({tokens})")
    check(per_request[0] > 0 and len(set(per_request)) == 1,
          f"dq_state_transfer_bytes_total grows by one state slot per request "
          f"({per_request[0]:.0f} bytes, whatever the prompt's length)")
    results = [None] * (2 * len(PROMPTS))

    def run(i):
        results[i] = content(*chat(dep.port, PROMPTS[i % len(PROMPTS)], N))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    check(all(results[i] == references[i % len(PROMPTS)] for i in range(len(results))),
          f"{len(results)} concurrent requests == dqserve generate")


def first_token_endings(dep, references, start):
    status, body = chat(dep.port, PROMPTS[0], 1)
    check(status == 200 and body["choices"][0]["finish_reason"] == "length",
          "max_tokens 1: the prefill worker's token ends it")
    stop = references[0].split()[0] if references[0].split() else references[0][:1]
    status, body = chat(dep.port, PROMPTS[0], N, stop=[stop])
    check(status == 200 and body["choices"][0]["finish_reason"] == "stop",
          f"a stop string in the first token ({stop!r}) ends it")
    back = wait_until(lambda: slots(dep, "decode") == start, 5)
    check(back, f"requests ended by their first token free their state slots ({start:.0f})")


def restart(dep, name):
    dep._spawn(name, "dq-decode", ["--port", str(dep.ports[name]), "--model", QWEN3_5,
                                   "--threads", "1", "--lease-ttl-ms", str(TTL_MS)])
    wait_port(dep.ports[name], dep.procs[name])


def kill_decode(dep, name, start):
    state = {}

    def run():
        body = {"model": name, "messages": [{"role": "user", "content": PROMPTS[1]}],
                "max_tokens": 3000, "temperature": 0, "ignore_eos": True, "stream": True}
        _, state["events"], _ = stream(dep.port, "/v1/chat/completions", body, timeout=60)
        state["ended_at"] = time.time()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.5)
    victim = busiest(dep, "decode")
    dep.kill(victim)
    killed_at = time.time()
    t.join(timeout=30)
    check(not t.is_alive(), "decode killed mid-stream: the stream ends")
    ev = state.get("events", [])
    check(any('"error"' in e for e in ev) and ev and ev[-1] == "data: [DONE]",
          f"decode killed: error event then [DONE] ({ev[-2:] if ev else ev})")
    check(state.get("ended_at", 1e18) - killed_at < 5, "decode killed: client told within 5 s")
    check(wait_until(lambda: slots(dep, "prefill") == start["prefill"], 5),
          "decode killed: the prefill worker's state slots are back")
    restart(dep, victim)
    back = wait_until(lambda: slots(dep, "decode") == start["decode"], 15)
    check(back, f"decode restarted: free state slots back at {start['decode']:.0f} "
                f"(now {slots(dep, 'decode'):.0f})")


def main():
    golden()
    refusals()
    references = [generate_cli(QWEN3_5, p, N) for p in PROMPTS]
    with Deployment(QWEN3_5, decode=2, decode_args=["--lease-ttl-ms", str(TTL_MS)]) as dep:
        name = served_name(dep.port)
        wait_until(lambda: slots(dep, "decode") > 0, 5)
        start = {role: slots(dep, role) for role in ("decode", "prefill")}
        check(start["decode"] > 0 and start["prefill"] > 0,
              f"the router sees free state slots ({start})")
        served_equal(dep, name, references)
        first_token_endings(dep, references, start["decode"])
        back = wait_until(lambda: slots(dep, "decode") == start["decode"] and
                          slots(dep, "prefill") == start["prefill"], 5)
        check(back, "every state slot back after the requests")
        kill_decode(dep, name, start)
        status, body = chat(dep.port, PROMPTS[2], N)
        check(content(status, body) == references[2], "after the restart: served == generate")
        check(wait_until(lambda: slots(dep, "decode") == start["decode"], 5),
              "after the restart: state slots back")
    finish()


if __name__ == "__main__":
    run_main(main, log_tails=True)
