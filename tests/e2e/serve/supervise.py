"""dqserve up heals itself: each of its processes (decode worker, prefill worker, router) killed
with SIGKILL is restarted on the same port; meanwhile /health says which worker is down and
requests fail cleanly (503) instead of hanging; afterwards requests are served again and the KV
blocks are back. The deployment stops only when asked (SIGINT, exit 0)."""
import os
import signal
import tempfile
import time

from serve_lib import (TINY, Up, chat, check, child_pid, finish, health, ok, served_name,
                       wait_until, worker_gauge)


def kill_and_heal(up, binary, role):
    pid = child_pid(up, binary)
    check(pid is not None, f"{binary} runs under dqserve up (pid {pid})")
    if pid is None:
        return
    os.kill(pid, signal.SIGKILL)
    t0 = time.time()
    if role is not None:
        seen = wait_until(lambda: health(up.port)[0] == 503
                          and any(f"{role} worker" in d for d in health(up.port)[1].get("down", [])),
                          5, step=0.05)
        check(seen, f"{binary} killed: /health is 503 and names the {role} worker "
                    f"({health(up.port)[1].get('down')})")
        # Meanwhile a request fails at once with a clean 503 (or, restarted already, succeeds).
        t1 = time.time()
        status, body = chat(up.port, "Say hi.", 2, model=served_name(up.port))
        check(status in (200, 503) and time.time() - t1 < 5,
              f"{binary} down: a request ends at once ({status}: {str(body)[:120]})")
    healed = wait_until(lambda: health(up.port)[0] == 200
                        and health(up.port)[1].get("status") == "ok", 30, step=0.1)
    check(healed, f"{binary} restarted: /health ok again after {time.time() - t0:.1f} s")
    new_pid = child_pid(up, binary)
    check(new_pid is not None and new_pid != pid, f"{binary} is a new process ({pid} -> {new_pid})")
    status, body = chat(up.port, "Say hi.", 4, model=served_name(up.port))
    check(status == 200, f"after {binary} restarted: a request is served ({status})")
    check(f"the {role or 'router'} process killed by signal 9; restarting it" in up.output(),
          f"dqserve up said it restarts the {role or 'router'}")


def main():
    work = tempfile.mkdtemp(prefix="dq-supervise-")
    up = Up(work, "up", TINY, "")
    try:
        status, _ = chat(up.port, "Say hi.", 4, model=served_name(up.port))
        check(status == 200, "dqserve up serves")
        start = worker_gauge(up.port, "dq_worker_free_kv_blocks", "decode")
        kill_and_heal(up, "dq-decode", "decode")
        kill_and_heal(up, "dq-prefill", "prefill")
        kill_and_heal(up, "dq-router", None)
        back = wait_until(lambda: worker_gauge(up.port, "dq_worker_free_kv_blocks", "decode")
                          == start, 5)
        check(back, f"decode KV blocks back to {start:.0f}")
        check(up.proc.poll() is None, "dqserve up still runs after three crashes")
    finally:
        rc = up.stop()
    check(rc == 0, f"SIGINT stops the deployment (exit {rc})")
    ok("done")
    finish()


if __name__ == "__main__":
    main()
