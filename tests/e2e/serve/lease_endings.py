"""Every way a request can end gives its KV lease back (real processes on loopback).

Thousands of requests, in random order from 8 clients, end in each of these ways: a stop string
the first token already contains (lm-eval's generate_until with "\\n"), a stop string later on,
max_tokens, the client hanging up at a random moment (streaming or not: queued, prefilling,
decoding), the router's request deadline (a second router with a short --request-timeout-ms over
the same workers), and a prefill worker killed mid-run. The lease ttl is far longer than the test,
so the ttl cannot hide a leak: afterwards the decode worker's free blocks and open leases must be
back at their start values within seconds, every request must have ended (none hangs), and every
failure must be a clean error."""
import http.client
import json
import random
import socket
import threading
import time

from serve_lib import (TINY, Deployment, check, fail, finish, free_port, ok, post_json,
                       served_name, stream, wait_port, wait_until, worker_gauge)

REQUESTS = 2400
CLIENTS = 8
TTL_MS = 600000  # ten minutes: nothing in this test may rely on the ttl
SEED = int(time.time())
WORDS = ("alpha beta gamma delta river stone cloud paper seven orange window music garden "
         "silver number quiet").split()

# Statuses a request may end with, by ending. 200s must also say how they ended.
CLEAN_ERRORS = {429, 499, 500, 502, 503, 504}


def decode_state(port):
    return (worker_gauge(port, "dq_worker_free_kv_blocks", "decode"),
            worker_gauge(port, "dq_worker_open_leases", "decode"))


def completion(port, prompt, max_tokens, **kw):
    body = {"model": served_name(port), "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0, **kw}
    return post_json(port, "/v1/completions", body, timeout=60)


def calibrate(port, prompts):
    """Greedy texts of each prompt: the first token's and the first eight tokens'."""
    out = {}
    for p in prompts:
        s1, b1 = completion(port, p, 1, ignore_eos=True)
        s8, b8 = completion(port, p, 8, ignore_eos=True)
        if s1 != 200 or s8 != 200:
            fail(f"calibration of {p!r}: {s1} {s8}")
            continue
        first, full = b1["choices"][0]["text"], b8["choices"][0]["text"]
        if first.strip() and full.startswith(first) and len(full) > len(first) + 2:
            out[p] = (first, full)
    return out


def hang_up(port, body, delay):
    """Sends a request and closes the socket after `delay` seconds, reading nothing."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        time.sleep(delay)
    return "hung_up"


def one(kind, port, deadline_port, prompt, texts, rng):
    """Runs one request of `kind`; returns a short outcome label, or raises on a bad answer."""
    first, full = texts
    name = served_name(port)
    if kind == "stop_first":
        stream_it = rng.random() < 0.5
        body = {"model": name, "prompt": prompt, "max_tokens": 200, "temperature": 0,
                "ignore_eos": True, "stop": [first[-1] if rng.random() < 0.5 else first],
                "stream": stream_it}
        if stream_it:
            status, events, _ = stream(port, "/v1/completions", body, timeout=60)
            if status not in CLEAN_ERRORS and (status != 200 or events[-1] != "data: [DONE]"):
                raise AssertionError(f"stop_first stream: {status} {events[-2:]}")
            return f"stop_first:{status}"
        status, b = post_json(port, "/v1/completions", body, timeout=60)
        if status == 200 and b["choices"][0]["finish_reason"] != "stop":
            raise AssertionError(f"stop_first: finish_reason {b['choices'][0]['finish_reason']}")
        return f"stop_first:{status}"
    if kind == "stop_later":
        j = rng.randrange(len(first), len(full) - 1)
        status, b = completion(port, prompt, 200, ignore_eos=True, stop=[full[j:j + 2]])
        if status == 200 and b["choices"][0]["finish_reason"] != "stop":
            raise AssertionError(f"stop_later: {b['choices'][0]}")
        return f"stop_later:{status}"
    if kind == "max_tokens":
        n = rng.randint(1, 6)
        status, b = completion(port, prompt, n, ignore_eos=True)
        if status == 200 and b["usage"]["completion_tokens"] != n:
            raise AssertionError(f"max_tokens {n}: usage {b['usage']}")
        return f"max_tokens:{status}"
    if kind == "disconnect_stream":
        k = rng.randint(0, 4)
        body = {"model": name, "prompt": prompt, "max_tokens": 64, "temperature": 0,
                "ignore_eos": True, "stream": True}
        status, _, _ = stream(port, "/v1/completions", body, timeout=60,
                              on_event=lambda i, e: i < k)
        return f"disconnect_stream:{status}"
    if kind == "disconnect":
        body = {"model": name, "prompt": prompt, "max_tokens": 64, "temperature": 0,
                "ignore_eos": True, "stream": rng.random() < 0.5}
        return hang_up(port, body, rng.choice([0, 0.001, 0.005, 0.02, 0.05]))
    if kind == "deadline":
        # Short and long requests, so the deadline lands before, during and after decoding.
        status, b = completion(deadline_port, prompt, rng.choice([1, 2, 8, 200]), ignore_eos=True)
        if status not in (200, 504) and status not in CLEAN_ERRORS:
            raise AssertionError(f"deadline: {status} {b}")
        return f"deadline:{status}"
    raise ValueError(kind)


def run_clients(dep, deadline_port, texts, kill_at):
    kinds = ["stop_first", "stop_first", "stop_later", "max_tokens", "disconnect_stream",
             "disconnect", "deadline"]
    counts, errors, lock = {}, [], threading.Lock()
    next_i = [0]
    prompts = list(texts)

    def client(cid):
        rng = random.Random(SEED * 100 + cid)
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= REQUESTS:
                return
            if i == kill_at:
                dep.kill("prefill1")
                ok(f"request {i}: killed prefill1 (requests on it must fail cleanly)")
            kind = rng.choice(kinds)
            p = rng.choice(prompts)
            try:
                label = one(kind, dep.port, deadline_port, p, texts[p], rng)
                status = label.rsplit(":", 1)[-1]
                if status.isdigit() and int(status) != 200 and int(status) not in CLEAN_ERRORS:
                    raise AssertionError(f"{kind}: unexpected status {status}")
            except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
                label = f"{kind}:exception"
                with lock:
                    errors.append(f"{kind} {p!r}: {e!r}")
            with lock:
                counts[label] = counts.get(label, 0) + 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    hung = sum(t.is_alive() for t in threads)
    check(hung == 0, f"all {CLIENTS} clients finished ({time.time() - t0:.1f} s)")
    return counts, errors


def main():
    rng = random.Random(SEED)
    print(f"seed {SEED}", flush=True)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for _ in range(24)]
    with Deployment(TINY, prefill=2, decode=1,
                    router_args=["--max-in-flight", "6", "--max-queue", "64"],
                    decode_args=["--lease-ttl-ms", str(TTL_MS), "--kv-capacity", "8192",
                                 "--max-batch", "4"]) as dep:
        served_name(dep.port)
        wait_until(lambda: decode_state(dep.port)[0] > 0, 5)
        start = decode_state(dep.port)
        check(start[0] > 0 and start[1] == 0,
              f"start: {start[0]:.0f} free decode KV blocks, {start[1]:.0f} open leases")
        texts = calibrate(dep.port, prompts)
        check(len(texts) >= 8, f"{len(texts)} prompts with a stop string in their first token")
        # The same workers behind a router whose deadline ends requests at any stage.
        deadline_port = free_port()
        args = ["--model", TINY, "--port", str(deadline_port), "--health-interval-ms", "200",
                "--request-timeout-ms", "25"]
        for name, port in dep.ports.items():
            args += ["--prefill" if name.startswith("prefill") else "--decode", f"127.0.0.1:{port}"]
        dep._spawn("router_deadline", "dq-router", args)
        wait_port(deadline_port, dep.procs["router_deadline"])
        wait_until(lambda: completion(deadline_port, "hi", 1)[0] in (200, 504), 10)

        counts, errors = run_clients(dep, deadline_port, texts, kill_at=REQUESTS // 2)
        print("outcomes:", json.dumps(dict(sorted(counts.items()))), flush=True)
        for e in errors[:10]:
            print("  ", e)
        check(not errors, f"{sum(counts.values())} requests, {len(errors)} unclean endings")
        for kind in ("stop_first", "stop_later", "max_tokens"):
            check(counts.get(f"{kind}:200", 0) > 0, f"some {kind} requests completed")
        # Whether any request beats a 25 ms deadline depends on the machine's load (CI saw none of
        # 341), so it is reported, not judged; the lease checks below hold either way.
        print(f"deadline requests completed: {counts.get('deadline:200', 0)}", flush=True)
        check(counts.get("stop_first:200", 0) >= REQUESTS // 10,
              f"{counts.get('stop_first:200', 0)} requests ended on their first token")
        check(counts.get("deadline:504", 0) + counts.get("deadline:503", 0) > 0,
              "some requests ran past the router's deadline")
        # A deadline is the request's, not a sign that a worker died.
        downs = [l for l in dep.log("router_deadline").splitlines()
                 if "decode worker" in l and "marked down" in l]
        check(not downs, f"the deadline router never marked the decode worker down ({downs[:1]})")
        back = wait_until(lambda: decode_state(dep.port) == start, 10, step=0.25)
        now = decode_state(dep.port)
        check(back, f"end: free decode KV blocks {now[0]:.0f} (start {start[0]:.0f}), open leases "
                    f"{now[1]:.0f} (start {start[1]:.0f})")
        status, _ = completion(dep.port, "still serving", 2)
        check(status == 200, "the deployment still serves")
    finish()


if __name__ == "__main__":
    main()
