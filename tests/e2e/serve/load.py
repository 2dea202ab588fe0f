"""16 concurrent streaming clients for 60 s against a decode batch of 4: every request either
completes or is refused with 429 (+ Retry-After); none is lost; the router's metrics add up."""
import json
import os
import threading
import time

from serve_lib import (SMOL, Deployment, check, finish, metric_sum, metrics, served_name, stream,
                       wait_until, worker_gauge)

CLIENTS = 16
SECONDS = float(os.environ.get("DQ_LOAD_SECONDS", "60"))


def client(port, name, idx, stats, lock, end):
    n = 0
    while time.time() < end:
        n += 1
        body = {"model": name, "max_tokens": 8 + (idx + n) % 9, "temperature": 0.7,
                "seed": idx * 1000 + n, "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": f"Client {idx}, question {n}: name a color."}]}
        try:
            status, events, headers = stream(port, "/v1/chat/completions", body, timeout=120)
        except Exception as e:  # a lost request: connection error or timeout
            with lock:
                stats["lost"].append(f"client {idx}: {e!r}")
            continue
        with lock:
            if status == 429:
                stats["rejected"] += 1
                if not headers.get("retry-after", "").isdigit():
                    stats["lost"].append("429 without Retry-After")
                time.sleep(0.2)
                continue
            if status != 200 or not events or events[-1] != "data: [DONE]":
                stats["lost"].append(f"status {status}: {events[-2:]}")
                continue
            chunks = [json.loads(e[6:]) for e in events[:-1]]
            finish_reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
            usage = chunks[-1].get("usage") or {}
            if finish_reasons[-1] not in ("stop", "length") or "completion_tokens" not in usage:
                stats["lost"].append(f"no finish/usage: {events[-3:]}")
                continue
            stats["completed"] += 1
            stats["tokens"] += usage["completion_tokens"]


def main():
    with Deployment(SMOL, threads=1, decode_args=["--max-batch", "4"],
                    router_args=["--max-in-flight", "4", "--max-queue", "4"]) as dep:
        name = served_name(dep.port)
        wait_until(lambda: worker_gauge(dep.port, "dq_worker_free_kv_blocks", "decode") > 0, 5)
        start_blocks = worker_gauge(dep.port, "dq_worker_free_kv_blocks", "decode")
        before = metrics(dep.port)
        stats = {"completed": 0, "rejected": 0, "tokens": 0, "lost": []}
        lock = threading.Lock()
        end = time.time() + SECONDS
        threads = [threading.Thread(target=client, args=(dep.port, name, i, stats, lock, end))
                   for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=SECONDS + 180)
        check(not any(t.is_alive() for t in threads), "every client finished")
        total = stats["completed"] + stats["rejected"]
        print(f"  {total} requests: {stats['completed']} completed, {stats['rejected']} got 429, "
              f"{len(stats['lost'])} lost, {stats['tokens']} tokens")
        check(not stats["lost"], f"no request lost ({stats['lost'][:3]})")
        check(stats["completed"] > 0 and stats["rejected"] > 0,
              "both completions and 429 refusals happened (queue bound exercised)")
        after = metrics(dep.port)

        def delta(prefix):
            return metric_sum(after, prefix) - metric_sum(before, prefix)

        check(delta("dq_requests_total") == total,
              f"metrics: dq_requests_total grew by {delta('dq_requests_total'):.0f} == {total}")
        rejected = sum(v for k, v in after.items()
                       if k.startswith("dq_requests_total{") and "rejected" in k) - sum(
            v for k, v in before.items() if k.startswith("dq_requests_total{") and "rejected" in k)
        check(rejected == stats["rejected"], f"metrics: rejected {rejected:.0f} == 429s seen")
        check(delta("dq_generation_tokens_total") == stats["tokens"],
              "metrics: generation tokens == sum of usage.completion_tokens")
        check(delta("dq_time_to_first_token_seconds_count") == stats["completed"],
              "metrics: one TTFT observation per completed request")
        back = wait_until(lambda: worker_gauge(dep.port, "dq_worker_free_kv_blocks", "decode")
                          == start_blocks, 5)
        check(back, "decode KV blocks back to their start value")
    finish()


if __name__ == "__main__":
    main()
