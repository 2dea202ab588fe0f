"""Disaggregated serving end to end on SmolLM2 through `dqserve up`:
- greedy output equals single-process `dqserve generate` token for token (same weights);
- with an NVFP4 W4A4 prefill checkpoint and the Q4_1 decode weights, the output equals the
  colocated mixed stack and differs from both homogeneous stacks (so KV really crossed);
- the same over UCX;
- SSE wire format, echo + logprobs, /v1/models, /metrics;
- Ctrl-C stops every process; SIGKILL of `dqserve up` leaves no orphan."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

from serve_lib import (BIN, SMOL, check, chat, fail, finish, free_port, generate_cli, metrics,
                       metric_sum, ok, post_json, post_json_get, request, stream)

PROMPT = ("Write a short story about a robot who learns to paint. Describe the colors it "
          "discovers and how it feels.")
N = 48


def write_config(path, port, prefill_weights="", prefill_compute="weight_only", backend="tcp"):
    ports = (free_port(), free_port())
    with open(path, "w") as f:
        f.write(f'model = "{SMOL}"\n[router]\nport = {port}\n[transfer]\nbackend = "{backend}"\n'
                f'[prefill]\nthreads = 1\nport = {ports[0]}\ncompute = "{prefill_compute}"\n')
        if prefill_weights:
            f.write(f'weights = "{prefill_weights}"\n')
        f.write(f'[decode]\nthreads = 1\nport = {ports[1]}\n')
    return ports


class Up:
    """`dqserve up --config FILE` as a child process."""

    def __init__(self, config, port):
        self.port = port
        self.log = tempfile.NamedTemporaryFile(prefix="dqserve-up-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([os.path.join(BIN, "dqserve"), "up", "--config", config],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + 180
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("dqserve up exited: " + self.output())
            if "dqserve: serving" in self.output():
                return
            time.sleep(0.1)
        raise RuntimeError("dqserve up not ready in 180 s: " + self.output())

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGINT):
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


def port_closed(port, within=10.0):
    end = time.time() + within
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            time.sleep(0.1)
        except OSError:
            return True
    return False


def check_sse(port):
    body = {"model": "x", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    body["model"] = post_json_get(port, "/v1/models")[1]["data"][0]["id"]
    status, events, _ = stream(port, "/v1/chat/completions", body)
    check(status == 200 and all(e.startswith("data: ") for e in events),
          f"SSE: every event is a data: line ({len(events)} events)")
    check(events[-1] == "data: [DONE]", "SSE: ends with [DONE]")
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "SSE: role chunk first")
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    check(finishes[-1] == "length" and all(f is None for f in finishes[:-1]),
          "SSE: finish_reason only on the last choice chunk")
    usage = chunks[-1]
    check(usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12,
          f"SSE: usage chunk last: {usage.get('usage')}")
    status, full = chat(port, PROMPT, 12)
    check(status == 200 and full["choices"][0]["message"]["content"] == text,
          "SSE: streamed text equals the non-streamed answer")


def check_echo_logprobs(port, name):
    status, body = post_json(port, "/v1/completions", {
        "model": name, "prompt": [[1, 504, 3458, 282, 4649, 314]], "max_tokens": 1,
        "temperature": 0, "logprobs": 1, "echo": True})
    lp = body.get("choices", [{}])[0].get("logprobs") or {}
    tl = lp.get("token_logprobs", [])
    check(status == 200 and len(tl) == 7 and tl[0] is None and all(
        isinstance(x, float) and x <= 0 for x in tl[1:]),
          f"echo + logprobs: one logprob per prompt token + 1 ({tl})")
    tops = lp.get("top_logprobs", [])
    check(len(tops) == 7 and all(len(t) >= 1 for t in tops[1:]), "echo: top_logprobs per position")


def check_homogeneous(port):
    reference = generate_cli(SMOL, PROMPT, N)
    status, body = chat(port, PROMPT, N)
    got = body["choices"][0]["message"]["content"] if status == 200 else body
    check(got == reference, f"disaggregated greedy == dqserve generate ({N} tokens)")
    if got != reference:
        print(f"  reference: {reference!r}\n  served:    {got!r}")
    check(body.get("usage", {}).get("completion_tokens") == N, "usage.completion_tokens")
    return reference


def main():
    work = tempfile.mkdtemp(prefix="dq-disagg-")
    port = free_port()
    cfg = os.path.join(work, "same.toml")
    worker_ports = write_config(cfg, port)
    up = Up(cfg, port)
    try:
        reference = check_homogeneous(port)
        name = post_json_get(port, "/v1/models")[1]["data"][0]["id"]
        check_sse(port)
        check_echo_logprobs(port, name)
        m = metrics(port)
        check(metric_sum(m, "dq_kv_transfer_bytes_total") > 0, "metrics: KV bytes moved")
        check(metric_sum(m, "dq_requests_total") >= 3, "metrics: requests counted")
    finally:
        rc = up.stop(signal.SIGINT)
    check(rc == 0, f"Ctrl-C: dqserve up exits 0 (got {rc})")
    check(all(port_closed(p) for p in (port, *worker_ports)), "Ctrl-C: every process is gone")

    # Full disaggregation: NVFP4 W4A4 prefill checkpoint, the GGUF Q4_1 decode weights.
    nvfp4 = os.path.join(work, "nvfp4")
    subprocess.run([os.path.join(BIN, "dq-quantize"), "--model", SMOL, "--format", "nvfp4",
                    "--calib", os.path.join(os.environ["DQ_SOURCE_DIR"], "tests/data/calib_text.txt"),
                    "--out", nvfp4], check=True, capture_output=True)
    mixed_ref = generate_cli(SMOL, PROMPT, N, ["--prefill-weights", nvfp4, "--prefill-compute",
                                               "w4a4"])
    nvfp4_only = generate_cli(SMOL, PROMPT, N, ["--prefill-weights", nvfp4, "--prefill-compute",
                                                "w4a4", "--decode-weights", nvfp4,
                                                "--decode-compute", "w4a4"])
    for backend in ("tcp", "ucx"):
        port = free_port()
        cfg = os.path.join(work, f"mixed-{backend}.toml")
        worker_ports = write_config(cfg, port, nvfp4, "w4a4", backend)
        up = Up(cfg, port)
        try:
            status, body = chat(port, PROMPT, N)
            got = body["choices"][0]["message"]["content"] if status == 200 else str(body)
            check(got == mixed_ref, f"{backend}: nvfp4-w4a4 prefill + Q4_1 decode == colocated "
                  "mixed stack")
            check(got != reference and got != nvfp4_only,
                  f"{backend}: differs from both homogeneous stacks (KV crossed)")
            _, models = post_json_get(port, "/v1/models")
            info = json.dumps(models)
            check("w4a4" in info and "Q4_1" in info, f"/v1/models names both phases' schemes")
        finally:
            if backend == "ucx":
                # SIGKILL of dqserve up: the workers must die with it (PR_SET_PDEATHSIG).
                up.stop(signal.SIGKILL)
                check(all(port_closed(p) for p in (port, *worker_ports)),
                      "SIGKILL of dqserve up leaves no orphan process")
            else:
                up.stop()
    finish()


if __name__ == "__main__":
    main()
