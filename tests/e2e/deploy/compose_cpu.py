"""The HTTP side of tests/e2e/deploy/compose_cpu_test.sh (the CPU compose deployment in Docker):

  compose_cpu.py reference ANSWER_FILE        `dqserve up` on deploy/compose/disagg-cpu.toml
                                              outside Docker (loopback, models/), its greedy
                                              answer written to ANSWER_FILE (check.reference)
  compose_cpu.py serve PORT ANSWER_FILE WHAT  the router published on PORT: /health 200 with
                                              both workers serving (bounded), the same greedy
                                              answer with the API key (env DQ_API_KEY), 401
                                              without it and with a wrong one

Prints ok:/FAIL: lines; exits 1 on any failure."""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check as C  # noqa: E402 - the deploy checks' reference run, /health wait and prompt
from serve_lib import check, fail, finish, free_port, ok, post_json, request  # noqa: E402

HEALTH_TIMEOUT_S = int(os.environ.get("DQ_COMPOSE_HEALTH_TIMEOUT", "180"))


def chat(port, key):
    """(status, body) of the greedy chat completion check.py asks, with `key` (None: no
    Authorization header)."""
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    status, raw = request("GET", port, "/v1/models", headers=headers)[::2]
    if status != 200:
        return status, raw.decode(errors="replace")
    model = json.loads(raw)["data"][0]["id"]
    return post_json(port, "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": C.PROMPT}],
        "max_tokens": 16, "temperature": 0}, headers=headers)


def reference(answer_file):
    with open(C.CPU_TOML) as f:
        text = f.read()
    ports = {"router": free_port(), "prefill": free_port(), "decode": free_port(),
             "router-grpc": free_port()}
    _, answer = C.reference(text, ports)
    check(C.ANSWER_WORD in answer, f"dqserve up on disagg-cpu.toml answers {answer!r}")
    with open(answer_file, "w") as f:
        json.dump(answer, f)


def serve(port, answer_file, what):
    with open(answer_file) as f:
        answer = json.load(f)
    key = os.environ["DQ_API_KEY"]  # the deployment's (compose_cpu_test.sh sets a fresh one)
    try:
        C.wait_healthy(port, 2, timeout=HEALTH_TIMEOUT_S)
        ok(f"{what}: /health 200, both workers serving")
    except RuntimeError as e:
        fail(f"{what}: {e}")
        return
    status, body = chat(port, key)
    got = body["choices"][0]["message"]["content"] if status == 200 else f"HTTP {status} {body}"
    check(got == answer, f"{what}: greedy answer {got!r} equals dqserve up's {answer!r}")
    for name, bad in (("no key", None), ("a wrong key", key + "x")):
        status, body = chat(port, bad)
        check(status == 401, f"{what}: 401 with {name} (got {status})")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "reference":
        reference(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
    if C.serve_lib.failures == 0:
        shutil.rmtree(C.WORK, ignore_errors=True)
    else:
        print(f"logs in {C.WORK}")
    finish()


if __name__ == "__main__":
    main()
