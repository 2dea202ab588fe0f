#!/usr/bin/env python3
"""Cross-check: next-token logits of dqserve (dq-tool logits) vs llama.cpp on the same GGUF file.

    .venv-bench/bin/python bench/llamacpp_crosscheck.py MODEL.gguf   (after bench/cpu.sh set up the venv)

llama.cpp quantizes activations to 8 bits inside its matmuls, dqserve computes in fp32 (checked
against HF transformers to 5e-5), so logits differ by ~0.1-0.4; the top-5 sets should agree."""
import json
import subprocess
import sys

import llama_cpp
import numpy as np

model = sys.argv[1]
llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=2, logits_all=True, verbose=False)
prompts = ["The quick brown fox jumps over the lazy dog. In 1969, Apollo 11",
           "def fibonacci(n):\n    a, b = 0, 1\n", "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"]
for p in prompts:
    ids = llm.tokenize(p.encode(), add_bos=False, special=True)
    llm.reset(); llm.eval(ids)
    ref = np.array(llm.scores[len(ids)-1])
    out = json.loads(subprocess.check_output(["build/release/bin/dq-tool", "logits", "--model", model, "--ids", json.dumps(ids), "--greedy", "1", "--top", "5"]))
    ours_top = [t[0] for t in out["top"]]
    ours_vals = np.array([t[1] for t in out["top"]])
    print(f"{len(ids)} tokens: llama.cpp top5 {list(np.argsort(-ref)[:5])} ours {ours_top}; max|d| on our top5 {np.max(np.abs(ref[ours_top]-ours_vals)):.3f}")
