"""Hostile and unusual HTTP clients against a live router (real processes on loopback): pipelined
keep-alive requests are answered in order; 70 connections trickling their heads (slowloris) do
not delay /health; a chunked body over --max-body-bytes is refused while it arrives and an
oversized header line before it ends; a non-streaming request whose client hangs up stops
generating and frees its KV blocks. Each failed against the cpp-httplib 0.11 front end."""
import json
import socket
import time

from serve_lib import (SMOL, Deployment, check, finish, metric_sum, metrics, run_main,
                       wait_until, worker_gauge)

KEY = "hostile-key"
AUTH = f"Authorization: Bearer {KEY}\r\n"


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_until(s, needle, count=1, limit=10.0):
    """Bytes until `needle` appeared `count` times, the peer closed, or `limit` seconds."""
    data, end = b"", time.time() + limit
    s.settimeout(0.2)
    while data.count(needle) < count and time.time() < end:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        data += chunk
    return data


def post(path, body):
    raw = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw


def pipelining(port, name):
    s = connect(port)
    chat = post("/v1/chat/completions", {"model": name, "max_tokens": 2,
                                         "messages": [{"role": "user", "content": "hi"}]})
    t0 = time.time()
    s.sendall(chat + f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode()
              + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data = read_until(s, b'"workers"', limit=20)  # in the last body
    s.close()
    order = [data.find(b'"chat.completion"'), data.find(b'"object":"list"'),
             data.find(b'"workers"')]
    check(data.count(b"HTTP/1.1 200") == 3 and -1 not in order and order == sorted(order),
          f"three pipelined requests answered in order in {time.time() - t0:.2f} s ({order})")


def slowloris(port):
    slow = []
    for _ in range(70):
        s = connect(port)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    worst = 0.0
    for i in range(5):
        for s in slow:  # one more header byte each
            s.sendall(b"X")
        t0 = time.time()
        h = connect(port, timeout=5)
        h.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = read_until(h, b'"workers"', limit=5)
        h.close()
        worst = max(worst, time.time() - t0)
        if b" 200 " not in got.split(b"\r\n", 1)[0]:
            worst = 99.0
        time.sleep(0.2)
    for s in slow:
        s.close()
    check(worst < 1.0, f"/health answers in {worst:.3f} s at worst beside 70 trickling clients")


def oversized(port):
    s = connect(port)
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{AUTH}"
              "Transfer-Encoding: chunked\r\n\r\n".encode())
    t0 = time.time()
    for _ in range(80):  # 80 KiB against --max-body-bytes 65536, and never a final chunk
        s.sendall(b"400\r\n" + b"a" * 1024 + b"\r\n")
    got = read_until(s, b"}}", limit=5)
    s.close()
    check(got.startswith(b"HTTP/1.1 413") and b"request_too_large" in got,
          f"a chunked body over the limit is refused while it arrives "
          f"({got[:12]!r}, {time.time() - t0:.2f} s)")
    s = connect(port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 200000)
    got = read_until(s, b"}}", limit=5)
    s.close()
    check(got.startswith(b"HTTP/1.1 431"), f"a 200 KB header line is refused ({got[:12]!r})")


def outcomes(m, outcome):
    return sum(v for k, v in m.items()
               if k.startswith("dq_requests_total{") and f'outcome="{outcome}"' in k)


def hang_up(dep, name):
    """A non-streaming request whose client leaves must stop: before, it generated every token."""
    port = dep.port
    hdr = {"Authorization": f"Bearer {KEY}"}
    start_blocks = worker_gauge(port, "dq_worker_free_kv_blocks", "decode", hdr)
    before = metrics(port, hdr)
    s = connect(port)
    s.sendall(post("/v1/chat/completions",
                   {"model": name, "max_tokens": 1500, "ignore_eos": True,
                    "messages": [{"role": "user", "content": "Count to a thousand."}]}))
    # Wait until it decodes (its generation tokens grow), then hang up.
    wait_until(lambda: worker_gauge(port, "dq_worker_free_kv_blocks", "decode", hdr)
               < start_blocks, 20)
    time.sleep(1.0)
    s.close()
    t0 = time.time()
    freed = wait_until(lambda: worker_gauge(port, "dq_worker_free_kv_blocks", "decode", hdr)
                       == start_blocks, 10)
    after = metrics(port, hdr)
    cancelled = outcomes(after, "cancelled") - outcomes(before, "cancelled")
    tokens = metric_sum(after, "dq_generation_tokens_total") - metric_sum(
        before, "dq_generation_tokens_total")
    check(freed and cancelled == 1,
          f"a non-streaming request stops when its client hangs up (blocks back in "
          f"{time.time() - t0:.2f} s, outcome cancelled {cancelled:.0f}, {tokens:.0f} of 1500 "
          f"tokens counted)")


def main():
    with Deployment(SMOL, threads=1, env={"DQ_API_KEY": KEY},
                    router_args=["--max-body-bytes", "65536"]) as dep:
        name = served_name_with_key(dep.port)
        for what, run in [("pipelining", lambda: pipelining(dep.port, name)),
                          ("slowloris", lambda: slowloris(dep.port)),
                          ("oversized", lambda: oversized(dep.port)),
                          ("hang-up", lambda: hang_up(dep, name))]:
            try:
                run()
            except OSError as e:  # the server dropped the connection: that case failed
                check(False, f"{what}: {e!r}")
        check(all(p.poll() is None for p in dep.procs.values()), "no process died")
    finish()


def served_name_with_key(port):
    s = connect(port)
    s.sendall(f"GET /v1/models HTTP/1.1\r\nHost: x\r\n{AUTH}Connection: close\r\n\r\n".encode())
    data = read_until(s, b"\x00", limit=5)  # until the server closes
    s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])["data"][0]["id"]


if __name__ == "__main__":
    run_main(main, log_tails=True)
