"""On the GPU machine: the DFlash drafter with a CUDA target (issue 18), on SmolLM2 with a random
DFlash drafter from `dq-tool make-dflash`:
- colocated `dqserve generate --device cuda --speculative dflash` equals plain greedy decoding on
  the GPU, token for token;
- across PD, both workers on the GPU (tcp: the target's KV through pinned host staging, the
  drafter's projected prompt context from the prefill worker's host pool): greedy chat output
  equals plain GPU decoding, the drafter's prompt context is "shipped", drafts are made; the same
  with a prefill worker that runs no drafter ("recomputed": the decode worker taps its own target
  pass), and through `dqserve up` with [decode] speculative = "dflash" and both devices cuda.
Needs the release-cuda binaries in DQ_BIN_DIR and models/SmolLM2-135M-Instruct.Q4_1.gguf."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2e", "serve"))
import spec_self  # noqa: E402
from serve_lib import (BIN, Deployment, Up, check, fail, finish, generate_cli,  # noqa: E402
                       run_main)
from spec_self import run_prompts  # noqa: E402

MODEL = os.environ.get("DQ_MODEL", os.path.abspath("models/SmolLM2-135M-Instruct.Q4_1.gguf"))
PROMPTS = [("What is the capital of France?", 24), ("Count from one to ten.", 20)]
spec_self.PROMPTS = PROMPTS
GPU = ["--device", "cuda"]


def main():
    work = tempfile.mkdtemp(prefix="dq-dflash-cuda-")
    drafter = os.path.join(work, "dflash")
    r = subprocess.run([os.path.join(BIN, "dq-tool"), "make-dflash", "--target", MODEL, "--out",
                        drafter, "--intermediate", "256"], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        fail(f"dq-tool make-dflash: {r.stderr[-400:]}")
        return
    flags = ["--speculative", "dflash", "--draft-weights", drafter]
    references = [generate_cli(MODEL, p, n, GPU) for p, n in PROMPTS]
    for (p, n), want in zip(PROMPTS, references):
        got = generate_cli(MODEL, p, n, [*GPU, *flags, "--spec-k", "4"])
        check(got == want, f"colocated generate --device cuda --speculative dflash {p[:24]!r}: "
              f"same text as plain ({got[:40]!r} vs {want[:40]!r})")
    prefill = [*GPU, "--transports", "tcp"]
    decode = [*GPU, "--transport", "tcp", *flags, "--spec-k", "4"]
    with Deployment(MODEL, decode_args=decode, prefill_args=[*prefill, *flags]) as dep:
        run_prompts(dep.port, "cuda workers, shipped", "shipped", references, min_accepted=0)
    with Deployment(MODEL, decode_args=decode, prefill_args=prefill) as dep:
        run_prompts(dep.port, "cuda workers, no drafter on prefill", "recomputed", references,
                    min_accepted=0)
    # The same through `dqserve up` and its TOML ([decode] speculative = "dflash" on cuda).
    up = Up(work, "dflash_cuda", MODEL,
            f'device = "cuda"\nspeculative = "dflash"\nspec_k = 4\ndraft_weights = "{drafter}"\n',
            prefill_toml='device = "cuda"\n')
    try:
        run_prompts(up.port, "dqserve up on cuda, shipped", "shipped", references,
                    min_accepted=0)
    finally:
        check(up.stop() == 0, "dqserve up on cuda stopped cleanly")
    shutil.rmtree(work, ignore_errors=True)
    finish()


if __name__ == "__main__":
    run_main(main, log_tails=True)
