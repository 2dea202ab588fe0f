"""On a two-GPU machine (issue 7): a decode worker killed under load.

Router + one prefill worker on cuda:0 + two decode workers on cuda:1, KV over DQ_TRANSPORT
(default nccl), real processes on loopback. Eight users stream long answers; after a few seconds
the decode worker with the most load gets SIGKILL. Checks: the streams it was serving end with an error event
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
from serve_lib import (Deployment, check, chat, finish, metrics, metric_sum,  # noqa: E402
                       served_name, stream, wait_until, worker_gauge)

MODEL = os.environ.get("DQ_MODEL") or os.environ.get("SMOLLM2", "models/SmolLM2-135M-Instruct.Q4_1.gguf")
TRANSPORT = os.environ.get("DQ_TRANSPORT", "nccl")
USERS = int(os.environ.get("DQ_USERS", "8"))
MAX_TOKENS = int(os.environ.get("DQ_MAX_TOKENS", "160"))
TTL_MS = int(os.environ.get("DQ_LEASE_TTL_MS", "10000"))
PROMPT = (" ".join(["The quick brown fox jumps over the lazy dog."] *
                   int(os.environ.get("DQ_PROMPT_REPEAT", "60"))) + " Now count to 500.")


def user(port, name, stop, records, live):
    body = {"model": name, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "ignore_eos": True, "stream": True}
    me = threading.get_ident()

    def on_event(i, line):
        live[me] = True  # this user's stream is decoding
        return True

    while not stop.is_set():
        rec = {"start": time.time()}
        live[me] = False
        try:
            status, events, _ = stream(port, "/v1/chat/completions", body, timeout=60,
                                       on_event=on_event)
            rec["status"] = status
            rec["error"] = next((e for e in events if '"error"' in e), None)
            rec["done"] = bool(events) and events[-1] == "data: [DONE]"
            rec["tail"] = events[-3:]
        except OSError as e:
            rec["status"], rec["error"], rec["done"] = None, f"client: {e}", False
        rec["end"] = time.time()
        records.append(rec)


def decode_load(router_port, worker_port):
    m = metrics(router_port)
    key = f'dq_worker_load{{role="decode",address="127.0.0.1:{worker_port}"}}'
    return m.get(key, 0.0)


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
        stop, records, live = threading.Event(), [], {}
        users = [threading.Thread(target=user, args=(port, name, stop, records, live))
                 for _ in range(USERS)]
        for t in users:
            t.start()
        # Kill once at least half the users' streams are decoding (each user is between requests
        # now and then, so all at once is rare), the decode worker with the most load.
        want = max(1, USERS // 2)
        check(wait_until(lambda: sum(live.values()) >= want, 120),
              f"at least {want} of {USERS} users' streams are decoding")
        time.sleep(float(os.environ.get("DQ_SECONDS", "1")))
        victim = max((n for n in dep.ports if n.startswith("decode")),
                     key=lambda n: decode_load(port, dep.ports[n]))
        loads = {n: decode_load(port, dep.ports[n]) for n in dep.ports if n.startswith("decode")}
        print(f"  decode loads before the kill: {loads}; killing {victim}")
        killed_at = time.time()  # before the call: its streams may end before kill() returns
        dep.kill(victim)
        # Keep the load on until a few requests that started after the kill have finished.
        wait_until(lambda: sum(r["start"] > killed_at + 1.0 for r in records) >= 2, 120)
        stop.set()
        for t in users:
            t.join(timeout=90)
        check(not any(t.is_alive() for t in users), "no client hangs")
        cut = [r for r in records if r["start"] < killed_at < r["end"]]
        hit = [r for r in cut if r["error"] is not None or not r["done"]]
        if os.environ.get("DQ_VERBOSE"):
            for r in cut:
                print(f"  in flight at the kill: {r['end'] - killed_at:+.2f} s", r.get("tail"))
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
