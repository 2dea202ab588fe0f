"""Helpers for the multi-process serving tests: start real dq-router / dq-prefill / dq-decode
processes on loopback, talk to the router over HTTP (stdlib only), read its metrics."""
import glob
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("DQ_BIN_DIR", "")
SRC = os.environ.get("DQ_SOURCE_DIR", "")
SMOL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TINY = os.path.join(os.path.dirname(BIN), "tiny-qwen3")

failures = 0


def ok(msg):
    print(f"ok: {msg}", flush=True)


def fail(msg):
    global failures
    failures += 1
    print(f"FAIL: {msg}", flush=True)


def check(cond, msg):
    (ok if cond else fail)(msg)
    return cond


def finish():
    if failures:
        print(f"{failures} failure(s)")
        sys.exit(1)
    print("all passed")


def free_port():
    """A free loopback port BELOW the kernel's ephemeral range: a port the kernel hands out
    itself (a worker's KV-transfer listener on port 0, an outgoing connection) can then never be
    the one we chose for another process between choosing it and that process binding it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError):
        low = 32768
    for _ in range(200):
        port = random.randint(max(1024, low - 12000), low - 1) if low > 3072 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
            except OSError:
                continue
    raise RuntimeError("no free port below the ephemeral range")


def wait_port(port, proc=None, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} after {timeout} s")


class Deployment:
    """Router + prefill worker(s) + decode worker(s) as real processes, started directly so a
    test can kill any of them."""

    def __init__(self, model, prefill=1, decode=1, router_args=(), prefill_args=(),
                 decode_args=(), env=None, threads=1):
        self.logdir = tempfile.mkdtemp(prefix="dq-serve-")
        self.procs = {}
        self.env = dict(os.environ, **(env or {}))
        self.ports = {}
        for i in range(decode):
            self._start(f"decode{i}", "dq-decode", ["--model", model, "--threads", str(threads),
                                                    *decode_args])
        for i in range(prefill):
            self._start(f"prefill{i}", "dq-prefill", ["--model", model, "--threads",
                                                      str(threads), *prefill_args])
        for name in list(self.procs):
            wait_port(self.ports[name], self.procs[name])
        self.port = free_port()
        args = ["--model", model, "--port", str(self.port), "--health-interval-ms", "200",
                *router_args]
        for name in self.ports:
            args += ["--prefill" if name.startswith("prefill") else "--decode",
                     f"127.0.0.1:{self.ports[name]}"]
        self._spawn("router", "dq-router", args)
        wait_port(self.port, self.procs["router"])
        self.wait_healthy()

    def _start(self, name, binary, args):
        self.ports[name] = free_port()
        self._spawn(name, binary, ["--port", str(self.ports[name]), *args])

    def _spawn(self, name, binary, args):
        log = open(os.path.join(self.logdir, f"{name}.log"), "wb")
        self.procs[name] = subprocess.Popen([os.path.join(BIN, binary), *args], stdout=log,
                                            stderr=subprocess.STDOUT, env=self.env)

    def wait_healthy(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if request("GET", self.port, "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("router never reported healthy workers; logs in " + self.logdir)

    def kill(self, name, sig=signal.SIGKILL):
        self.procs[name].send_signal(sig)
        self.procs[name].wait(timeout=10)

    def log(self, name):
        with open(os.path.join(self.logdir, f"{name}.log"), errors="replace") as f:
            return f.read()

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in self.procs.items():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                fail(f"{name} did not stop within 10 s of SIGTERM")
                p.kill()
                p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        if exc[0] is not None:
            for name in self.procs:
                print(f"--- {name} log ---\n{self.log(name)[-3000:]}")


class Up:
    """`dqserve up --config FILE`: one prefill and one decode worker (one thread each) on `model`,
    `decode_toml` appended to the [decode] table (`prefill_toml` to the [prefill] one,
    `router_toml` to the [router] one); the router on self.port."""

    def __init__(self, work, name, model, decode_toml, prefill_toml="", router_toml=""):
        self.port = free_port()
        cfg = os.path.join(work, name + ".toml")
        with open(cfg, "w") as f:
            f.write(f'model = "{model}"\n[router]\nport = {self.port}\n{router_toml}'
                    f'[prefill]\nthreads = 1\nport = {free_port()}\n{prefill_toml}'
                    f'[decode]\nthreads = 1\nport = {free_port()}\n' + decode_toml)
        self.log = os.path.join(work, "up.log")
        self.proc = subprocess.Popen([os.path.join(BIN, "dqserve"), "up", "--config", cfg],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        end = time.time() + 180
        while "dqserve: serving" not in self.output():
            if self.proc.poll() is not None or time.time() > end:
                raise RuntimeError("dqserve up did not start: " + self.output())
            time.sleep(0.1)

    def output(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=30)


def request(method, port, path, body=None, headers=None, timeout=120):
    """One HTTP request; returns (status, headers dict, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    conn.close()
    return out


def post_json(port, path, body, headers=None, timeout=120):
    status, hdrs, raw = request("POST", port, path, body, headers, timeout)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"raw": raw.decode(errors="replace")}


def stream(port, path, body, headers=None, timeout=120, on_event=None):
    """POSTs a streaming request; returns (status, list of raw 'data:' payload strings, headers).
    on_event(i, payload) may return False to drop the connection (a client going away)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", **(headers or {})})
    sock = conn.sock  # the response owns it once the server says Connection: close
    r = conn.getresponse()
    events = []
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    if r.status != 200:
        return r.status, [r.read().decode(errors="replace")], hdrs
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            raw, buf = buf.split(b"\n\n", 1)
            line = raw.decode()
            events.append(line)
            if on_event is not None and on_event(len(events) - 1, line) is False:
                sock.shutdown(socket.SHUT_RDWR)
                r.close()
                conn.close()
                return r.status, events, hdrs
    conn.close()
    return r.status, events, hdrs


def metrics(port, headers=None):
    """Parses /metrics into {name{labels}: value}."""
    status, _, raw = request("GET", port, "/metrics", headers=headers)
    out = {}
    for line in raw.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


def metric_sum(m, prefix):
    return sum(v for k, v in m.items() if k == prefix or k.startswith(prefix + "{"))


def generate_cli(model, prompt, max_tokens, extra=()):
    """The single-process reference: dqserve generate (greedy)."""
    r = subprocess.run([os.path.join(BIN, "dqserve"), "generate", "--model", model, "--prompt",
                        prompt, "--max-tokens", str(max_tokens), "--threads", "2", *extra],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"dqserve generate failed: {r.stderr}")
    return r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout


def chat(port, prompt, max_tokens, **kw):
    body = {"model": kw.pop("model", None) or served_name(port),
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, **kw}
    return post_json(port, "/v1/chat/completions", body)


_names = {}


def served_name(port):
    if port not in _names:
        status, body = post_json_get(port, "/v1/models")
        _names[port] = body["data"][0]["id"]
    return _names[port]


def post_json_get(port, path, headers=None):
    status, _, raw = request("GET", port, path, headers=headers)
    return status, json.loads(raw)


def cpu_ticks(pid):
    """utime + stime of a process, in clock ticks (to see which worker is busy)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def busiest(dep, prefix, window=0.5):
    """The name of the `prefix*` process that used the most CPU over `window` seconds."""
    names = [n for n in dep.procs if n.startswith(prefix) and dep.procs[n].poll() is None]
    before = {n: cpu_ticks(dep.procs[n].pid) for n in names}
    time.sleep(window)
    return max(names, key=lambda n: cpu_ticks(dep.procs[n].pid) - before[n])


def worker_gauge(port, metric, role, headers=None):
    """Sum of a per-worker gauge (e.g. dq_worker_free_kv_blocks) over live workers of a role."""
    m = metrics(port, headers)
    total = 0.0
    for k, v in m.items():
        if k.startswith(metric + "{") and f'role="{role}"' in k:
            total += v
    return total


def run_main(main, log_tails=False):
    """Runs a test's main(): an exception becomes one failure (with `log_tails`, the last lines
    of every worker log of the deployments it started), then the summary and exit code."""
    try:
        main()
    except Exception as e:  # noqa: BLE001 - report, then fail the test
        fail(f"{type(e).__name__}: {e}")
        if log_tails:
            for log in sorted(glob.glob(os.path.join(tempfile.gettempdir(), "dq-serve-*",
                                                     "*.log"))):
                with open(log, errors="replace") as f:
                    print(f"--- {log} (tail)\n" + "".join(f.readlines()[-8:]))
        finish()


def wait_until(pred, timeout, step=0.1):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def child_pid(up, binary):
    """The pid of the child of `dqserve up` (an Up) that runs `binary`, or None."""
    out = subprocess.run(["ps", "--ppid", str(up.proc.pid), "-o", "pid=,args="],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        if os.path.basename(args.split()[0]) == binary:
            return int(pid)
    return None


def health(port):
    """GET /health: (status, parsed body), or (None, {}) when nothing answers."""
    try:
        status, _, raw = request("GET", port, "/health", timeout=3)
        return status, json.loads(raw)
    except (OSError, ValueError):
        return None, {}

