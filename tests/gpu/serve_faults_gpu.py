"""On a two-GPU machine (issue 7): a decode worker killed under load.

Router + one prefill worker on cuda:0 + two decode workers on cuda:1, KV over DQ_TRANSPORT
(default nccl), real processes on loopback. Eight users stream long answers; after a few seconds
the busier decode worker gets SIGKILL. Checks: the streams it was serving end with an error event
within 5 s; no client hangs; requests started a second after the kill are all served (by the
other decode worker); the prefill worker's KV blocks all come back (its sends to the dead worker
failed and released their buffers); the deployment still answers afterwards.

Env: DQ_BIN_DIR (release-cuda bin), DQ_MODEL (default $SMOLLM2), DQ_TRANSPORT, DQ_SECONDS,
DQ_PREFILL_DEVICE / DQ_DECODE_DEVICE (e.g. cpu + DQ_TRANSPORT=tcp: the harness on any machine).
Exit 0 when all passed."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "serve"))
from serve_lib import (Deployment, busiest, check, chat, finish, metrics, metric_sum,  # noqa
                       served_name, stream, wait_until, worker_gauge)

MODEL = os.environ.get("DQ_MODEL") or os.environ.get("SMOLLM2", "models/SmolLM2-135M-Instruct.Q4_1.gguf")
TRANSPORT = os.environ.get("DQ_TRANSPORT", "nccl")
USERS = int(os.environ.get("DQ_USERS", "8"))
MAX_TOKENS = int(os.environ.get("DQ_MAX_TOKENS", "160"))
TTL_MS = int(os.environ.get("DQ_LEASE_TTL_MS", "10000"))
PROMPT = (" ".join(["The quick brown fox jumps over the lazy dog."] *
                   int(os.environ.get("DQ_PROMPT_REPEAT", "60"))) + " Now count to 500.")


def user(port, name, stop, records):
    body = {"model": name, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "ignore_eos": True, "stream": True}
    while not stop.is_set():
        rec = {"start": time.time()}
        try:
            status, events, _ = stream(port, "/v1/chat/completions", body, timeout=60)
            rec["status"] = status
            rec["error"] = next((e for e in events if '"error"' in e), None)
            rec["done"] = bool(events) and events[-1] == "data: [DONE]"
        except OSError as e:
            rec["status"], rec["error"], rec["done"] = None, f"client: {e}", False
        rec["end"] = time.time()
        records.append(rec)


def main():
    pdev = os.environ.get("DQ_PREFILL_DEVICE", "cuda:0")
    ddev = os.environ.get("DQ_DECODE_DEVICE", "cuda:1")
    dev = dict(prefill_args=["--device", pdev, "--transports", TRANSPORT],
               decode_args=["--device", ddev, "--transport", TRANSPORT,
                            "--lease-ttl-ms", str(TTL_MS)])
    with Deployment(MODEL, prefill=1, decode=2, threads=4, **dev) as dep:
        port, name = dep.port, served_name(dep.port)
        wait_until(lambda: worker_gauge(port, "dq_worker_free_kv_blocks", "prefill") > 0, 10)
        prefill_start = worker_gauge(port, "dq_worker_free_kv_blocks", "prefill")
        status, _ = chat(port, "Say hi.", 4, model=name)
        check(status == 200, f"warm-up request served ({status})")
        stop, records = threading.Event(), []
        users = [threading.Thread(target=user, args=(port, name, stop, records))
                 for _ in range(USERS)]
        for t in users:
            t.start()
        time.sleep(float(os.environ.get("DQ_SECONDS", "4")))
        victim = busiest(dep, "decode")
        dep.kill(victim)
        killed_at = time.time()
        time.sleep(8)
        stop.set()
        for t in users:
            t.join(timeout=90)
        check(not any(t.is_alive() for t in users), "no client hangs")
        cut = [r for r in records if r["start"] < killed_at < r["end"]]
        hit = [r for r in cut if r["error"] is not None or not r["done"]]
        check(len(hit) > 0, f"{len(hit)} of the {len(cut)} streams in flight at the kill ended with "
                            f"an error (the others were on the surviving decode worker)")
        late = max((r["end"] - killed_at for r in hit), default=99)
        check(late < 5, f"their clients were told within 5 s of the kill ({late:.2f} s)")
        msgs = {str(r["error"])[:300] for r in hit}
        print("  errors seen:", *sorted(msgs)[:4], sep="\n    ")
        after = [r for r in records if r["start"] > killed_at + 1.0]
        served = [r for r in after if r["status"] == 200 and r["error"] is None and r["done"]]
        check(len(after) > 0 and len(served) == len(after),
              f"requests started 1 s after the kill: {len(served)}/{len(after)} served")
        back = wait_until(lambda: worker_gauge(port, "dq_worker_free_kv_blocks", "prefill")
                          == prefill_start, TTL_MS / 1000 + 10)
        check(back, "the prefill worker's KV blocks all came back "
                    f"({worker_gauge(port, 'dq_worker_free_kv_blocks', 'prefill'):.0f} of "
                    f"{prefill_start:.0f})")
        m = metrics(port)
        print(f"  kv transfer failures counted: {metric_sum(m, 'dq_kv_transfer_failures_total'):.0f}")
        status, _ = chat(port, "Say hi.", 4, model=name)
        check(status == 200, f"a new request after the load is served ({status})")
    finish()


if __name__ == "__main__":
    main()
