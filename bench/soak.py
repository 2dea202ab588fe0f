"""Soak: `dqserve up` under 16 streaming clients for N minutes (mixed prompt and answer lengths,
random stop strings, random client cancels), with a worker killed by SIGKILL every K seconds
(decode and prefill in turn; dqserve up restarts it). Passes when no request hung, every
failure was a clean error (an HTTP 429/5xx status or an SSE error event, then [DONE]), the
decode worker's KV blocks and open leases are back at their start values and /health is ok at
the end. Writes bench/results/soak_<name>.json with the machine, commit, command and counts.

  bench/soak.sh [--minutes 10] [--kill-every 120] [--clients 16] [--model PATH] [--name cpu]
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e", "serve"))
os.environ.setdefault("DQ_BIN_DIR", os.path.join(SRC, "build", "release", "bin"))
os.environ.setdefault("DQ_SOURCE_DIR", SRC)

import serve_lib  # noqa: E402
from serve_lib import Up, child_pid, health, stream, wait_until, worker_gauge  # noqa: E402

from machine_info import machine  # noqa: E402

WORDS = ("river stone cloud paper seven orange window music garden silver number quiet "
         "morning letter bridge").split()


def one_request(port, name, rng):
    """One streaming chat; returns an outcome label. Raises on an unclean ending."""
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.choice([5, 40, 300])))
    body = {"model": name, "stream": True, "temperature": rng.choice([0, 0.8]),
            "max_tokens": rng.choice([4, 32, 128]),
            "messages": [{"role": "user", "content": prompt}]}
    if rng.random() < 0.3:
        body["stop"] = [rng.choice([" ", "e", "\n", "the"])]
    cancel_after = rng.randint(0, 8) if rng.random() < 0.2 else None
    status, events, _ = stream(port, "/v1/chat/completions", body, timeout=300,
                               on_event=(lambda i, e: i < cancel_after) if cancel_after else None)
    if status != 200:
        if status in (429, 499, 500, 502, 503, 504):
            return f"http_{status}"
        raise AssertionError(f"unexpected status {status}: {events[:1]}")
    if cancel_after is not None and len(events) == cancel_after + 1 and events[-1] != "data: [DONE]":
        return "cancelled"
    if not events or events[-1] != "data: [DONE]":
        raise AssertionError(f"stream ended without [DONE]: {events[-2:]}")
    if any('"error"' in e for e in events):
        return "error_event"
    return "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--kill-every", type=float, default=120)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--model", default=serve_lib.SMOL)
    ap.add_argument("--name", default="cpu")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dq-soak-")
    up = Up(work, "soak", a.model, "lease_ttl_ms = 600000\n")
    name = serve_lib.served_name(up.port)
    start = (worker_gauge(up.port, "dq_worker_free_kv_blocks", "decode"),
             worker_gauge(up.port, "dq_worker_open_leases", "decode"))
    counts, errors, lock = {}, [], threading.Lock()
    end_at = time.time() + a.minutes * 60
    longest = [0.0]

    def client(cid):
        rng = random.Random(cid)
        while time.time() < end_at:
            t0 = time.time()
            try:
                label = one_request(up.port, name, rng)
            except Exception as e:  # noqa: BLE001 - counted and reported, the soak goes on
                label = "unclean"
                with lock:
                    errors.append(repr(e)[:300])
            with lock:
                counts[label] = counts.get(label, 0) + 1
                longest[0] = max(longest[0], time.time() - t0)
            if label.startswith("http_"):
                time.sleep(0.2)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    for t in threads:
        t.start()
    kills, victims = [], ["dq-decode", "dq-prefill"]
    next_kill = time.time() + a.kill_every
    while time.time() < end_at:
        time.sleep(1)
        if time.time() >= next_kill:
            victim = victims[len(kills) % 2]
            pid = child_pid(up, victim)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                kills.append({"at_s": round(a.minutes * 60 - (end_at - time.time()), 1),
                              "binary": victim, "pid": pid})
                print(f"soak: killed {victim} ({pid})", flush=True)
            next_kill += a.kill_every
    for t in threads:
        t.join(timeout=330)
    hung = sum(t.is_alive() for t in threads)
    healthy = wait_until(lambda: health(up.port)[0] == 200, 60)
    back = wait_until(lambda: (worker_gauge(up.port, "dq_worker_free_kv_blocks", "decode"),
                               worker_gauge(up.port, "dq_worker_open_leases", "decode"))
                      == start, 30)
    final = (worker_gauge(up.port, "dq_worker_free_kv_blocks", "decode"),
             worker_gauge(up.port, "dq_worker_open_leases", "decode"))
    restarts = up.output().count("restarting it in")
    up.stop()
    passed = hung == 0 and not errors and healthy and back and restarts >= len(kills)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=SRC).stdout.strip()
    result = {"commit": commit, "machine": machine(), "command": " ".join(sys.argv),
              "minutes": a.minutes, "clients": a.clients, "model": os.path.basename(a.model),
              "outcomes": dict(sorted(counts.items())), "requests": sum(counts.values()),
              "unclean": errors[:20], "hung_clients": hung, "kills": kills,
              "restarts_reported": restarts, "longest_request_s": round(longest[0], 1),
              "decode_blocks_and_leases": {"start": start, "end": final},
              "healthy_at_end": healthy, "passed": passed}
    out = os.path.join(SRC, "bench", "results", f"soak_{a.name}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
