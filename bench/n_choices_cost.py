"""What n > 1 costs (router/choice_fanout.h): each choice is its own request, so the prompt is
prefilled once per choice unless the prefill worker's prefix cache has it. A live deployment
(tests/e2e/serve/serve_lib.Deployment: router + one prefill + one decode worker, 1 thread each)
on SmolLM2-135M Q4_1; a 861-token prompt, max_tokens 4, n = 1 and 4 (twice each, after one
warm-up request), without and with --prefix-cache on the prefill worker. Writes
bench/results/n_choices_cpu.json. Usage: DQ_BIN_DIR=build/release/bin python3 bench/n_choices_cost.py"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e", "serve"))
sys.path.insert(0, HERE)
from machine_info import machine  # noqa: E402
from serve_lib import SMOL, Deployment, metric_sum, metrics, post_json  # noqa: E402

PROMPT = " ".join(f"word{i % 97}" for i in range(300))


def run(d, n):
    m0 = metrics(d.port)
    t = time.time()
    status, r = post_json(d.port, "/v1/completions",
                          {"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": PROMPT, "n": n,
                           "max_tokens": 4, "temperature": 1, "seed": 1})
    wall = time.time() - t
    m1 = metrics(d.port)

    def delta(name):
        return metric_sum(m1, name) - metric_sum(m0, name)
    assert status == 200 and len(r["choices"]) == n, (status, r)
    return {"n": n, "wall_s": round(wall, 3), "usage": r["usage"],
            "prompt_tokens_of_choices": delta("dq_prompt_tokens_total"),
            "prompt_tokens_from_prefix_cache": delta("dq_prompt_cached_tokens_total")}


def main():
    runs = []
    for args in ([], ["--prefix-cache"]):
        with Deployment(SMOL, prefill_args=args) as d:
            run(d, 1)  # warm-up (with --prefix-cache it also fills the cache)
            for n in (1, 4, 1, 4):
                runs.append({"prefill_args": args, **run(d, n)})
                print(json.dumps(runs[-1]), flush=True)
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    out = {"machine": machine(), "commit": commit, "load_average": os.getloadavg(),
           "command": "DQ_BIN_DIR=build/release/bin python3 bench/n_choices_cost.py",
           "model": os.path.basename(SMOL), "runs": runs}
    path = os.path.join(HERE, "results", "n_choices_cpu.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
