"""Failures with real processes: a client that goes away, a decode worker and a prefill worker
killed with SIGKILL mid-request. Nothing hangs, errors arrive fast, KV blocks come back."""
import threading
import time

from serve_lib import (SMOL, Deployment, busiest, check, chat, fail, finish, ok, served_name,
                       stream, wait_until, worker_gauge)

TTL_MS = 2000


def long_stream_body(name, max_tokens=400):
    return {"model": name, "messages": [{"role": "user", "content": "Count from 1 to 1000."}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}


def free_blocks(dep):
    return worker_gauge(dep.port, "dq_worker_free_kv_blocks", "decode")


def blocks_return(dep, start, what, timeout):
    back = wait_until(lambda: free_blocks(dep) == start, timeout)
    check(back, f"{what}: decode KV blocks back to {start:.0f} (now {free_blocks(dep):.0f})")


def client_disconnect(dep, name, start):
    prefill_start = worker_gauge(dep.port, "dq_worker_free_kv_blocks", "prefill")
    status, events, _ = stream(dep.port, "/v1/chat/completions", long_stream_body(name),
                               on_event=lambda i, e: i < 3)
    check(status == 200 and len(events) == 4, "disconnect: read 4 events, then hung up")
    blocks_return(dep, start, "client disconnect", 3)
    back = wait_until(lambda: worker_gauge(dep.port, "dq_worker_free_kv_blocks", "prefill")
                      == prefill_start, 3)
    check(back, f"client disconnect: prefill workers' KV blocks back to {prefill_start:.0f}")


def kill_prefill(dep, name, start):
    long_prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 150)
    result = {}

    def run():
        t0 = time.time()
        result["status"], result["body"] = chat(dep.port, long_prompt, 8, model=name)
        result["seconds"] = time.time() - t0

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.0)
    victim = busiest(dep, "prefill")
    dep.kill(victim)
    killed_at = time.time()
    t.join(timeout=30)
    check(not t.is_alive(), "prefill killed: the request does not hang")
    status = result.get("status")
    msg = str(result.get("body", ""))
    check(status in (502, 503) and "prefill" in msg.lower(),
          f"prefill killed: clear error ({status}: {msg[:200]})")
    check(time.time() - killed_at < 10, "prefill killed: error within 10 s")
    blocks_return(dep, start, "prefill killed: lease reclaimed", TTL_MS / 1000 + 3)
    status, body = chat(dep.port, "Say hi.", 4, model=name)
    check(status == 200, f"prefill killed: next request served by the live prefill worker")


def kill_decode(dep, name):
    state = {"events": [], "killed_at": None}

    def run():
        _, state["events"], _ = stream(dep.port, "/v1/chat/completions",
                                       long_stream_body(name, 2000), timeout=60)
        state["ended_at"] = time.time()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.5)
    victim = busiest(dep, "decode")
    dep.kill(victim)
    state["killed_at"] = time.time()
    t.join(timeout=30)
    check(not t.is_alive(), "decode killed: the stream ends")
    ev = state["events"]
    delay = state.get("ended_at", 1e18) - state["killed_at"]
    check(any('"error"' in e for e in ev) and ev and ev[-1] == "data: [DONE]",
          f"decode killed: error event then [DONE] ({ev[-2:] if ev else ev})")
    check(delay < 5, f"decode killed: client told within 5 s ({delay:.2f} s)")
    status, body = chat(dep.port, "Say hi.", 4, model=name)
    check(status == 200, f"decode killed: next request served by the other decode worker")
    return victim


def main():
    with Deployment(SMOL, prefill=2, decode=2,
                    decode_args=["--lease-ttl-ms", str(TTL_MS), "--kv-capacity", "4096"]) as dep:
        name = served_name(dep.port)
        wait_until(lambda: free_blocks(dep) > 0, 5)
        start = free_blocks(dep)
        check(start > 0, f"router sees decode KV blocks ({start:.0f} free)")
        client_disconnect(dep, name, start)
        kill_prefill(dep, name, start)
        victim = kill_decode(dep, name)
        survivor = [n for n in dep.procs if n.startswith("decode") and n != victim][0]
        dep.kill(survivor)
        t0 = time.time()
        status, body = chat(dep.port, "Say hi.", 4, model=name)
        check(status == 503 and time.time() - t0 < 5,
              f"no decode worker left: 503 at once ({status}: {str(body)[:160]})")
        status, _, _ = stream(dep.port, "/v1/chat/completions", long_stream_body(name, 4))
        check(status == 503, "no decode worker left: streaming request also 503")
    finish()


if __name__ == "__main__":
    main()
