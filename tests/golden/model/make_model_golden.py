#!/usr/bin/env python3
"""Golden outputs of the reference implementation (HF transformers, fp32) for dqserve's models.

Run on the GPU machine (it has torch + transformers; the `gguf` package travels as a wheel):
    python3 tests/golden/model/make_model_golden.py --smollm2 PATH.gguf --tiny-qwen3 DIR --out DIR
or, for one model, on any machine with torch (the CPU is used when there is no GPU):
    dq-tool make-tiny --arch gemma3 --out DIR --seed 3 --layers 6 --dtype f32
    python3 tests/golden/model/make_model_golden.py --tiny-gemma3 DIR --out tests/golden/model
(Qwen3.5 alike: make-tiny --arch qwen3_5 --seed 5 --layers 8 --dtype f32, then --tiny-qwen3_5 DIR;
its 3 GDN layers per attention layer run HF's torch chunked/recurrent gated delta rule, the
prompt through the chunked form (64-token chunks) and each greedy step through the recurrent one.)

For each model and prompt it records the prompt ids (from HF's tokenizer), the final-position
logits (float32, base64), and a 32-token greedy continuation computed step by step with the KV
cache, plus the top-2 margin at each step (so a near tie is visible, not hidden).
"""
import argparse
import base64
import hashlib
import json
import os
import platform

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    {"name": "chat_capital", "chat": [{"role": "user", "content": "What is the capital of France?"}]},
    {"name": "raw_fox", "text": "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11"},
    {"name": "raw_long", "text": (
        "Paged attention stores the key-value cache in fixed-size blocks, so that memory is "
        "allocated on demand and shared between sequences. " * 6
        + "Numbers: 3.14159, 2.71828, 1.41421. Code: def f(x):\n    return x * 2\n"
        + "Unicode: café, naïve, 東京, 😀. The answer is")},
]
GREEDY_STEPS = 32
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(path, gguf_file):
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(path, **kw)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, **kw)
    return tok, model.to(DEVICE).eval()


def prompt_ids(tok, p, chat_kwargs):
    if "chat" in p:
        text = tok.apply_chat_template(p["chat"], tokenize=False, add_generation_prompt=True,
                                       **chat_kwargs)
    else:
        text = p["text"]
    return text, tok(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def run_prompt(model, ids):
    x = torch.tensor([ids], device=DEVICE)
    out = model(input_ids=x, use_cache=True)
    last = out.logits[0, -1].float().cpu().numpy()
    past, logits = out.past_key_values, out.logits[0, -1]
    greedy, margins = [], []
    for _ in range(GREEDY_STEPS):
        top2 = torch.topk(logits, 2)
        nxt = int(top2.indices[0])
        greedy.append(nxt)
        margins.append(float(top2.values[0] - top2.values[1]))
        out = model(input_ids=torch.tensor([[nxt]], device=DEVICE), past_key_values=past,
                    use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return last, greedy, margins


def golden(name, path, gguf_file, chat_kwargs):
    tok, model = load(path, gguf_file)
    file_path = os.path.join(path, gguf_file) if gguf_file else os.path.join(path, "model.safetensors")
    result = {
        "model": name,
        "file_sha256": sha256(file_path),
        "reference": {"transformers": transformers.__version__, "torch": torch.__version__,
                      "dtype": "float32",
                      "device": torch.cuda.get_device_name(0) if DEVICE == "cuda"
                      else f"cpu ({platform.processor() or platform.machine()})",
                      "python": platform.python_version()},
        "prompts": [],
    }
    for p in PROMPTS:
        text, ids = prompt_ids(tok, p, chat_kwargs)
        last, greedy, margins = run_prompt(model, ids)
        result["prompts"].append({
            "name": p["name"], "text": text, "ids": ids,
            "last_logits_f32_b64": base64.b64encode(last.astype("<f4").tobytes()).decode(),
            "top1": int(np.argmax(last)), "greedy": greedy, "greedy_margins": margins,
            "greedy_text": tok.decode(greedy),
        })
        print(f"{name}/{p['name']}: {len(ids)} prompt tokens -> {tok.decode(greedy)!r}")
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--tiny-qwen3", help="directory made by dq-tool make-tiny")
    ap.add_argument("--tiny-gemma3", help="directory made by dq-tool make-tiny --arch gemma3 "
                    "--seed 3 --layers 6 --dtype f32")
    ap.add_argument("--tiny-qwen3_5", help="directory made by dq-tool make-tiny --arch qwen3_5 "
                    "--seed 5 --layers 8 --dtype f32")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(a.out, exist_ok=True)
    runs = []
    if a.smollm2:
        runs.append(("smollm2.json", "SmolLM2-135M-Instruct.Q4_1",
                     os.path.dirname(os.path.abspath(a.smollm2)), os.path.basename(a.smollm2), {}))
    if a.tiny_qwen3:
        runs.append(("tiny_qwen3.json", "tiny-qwen3 (dq-tool make-tiny --seed 1)", a.tiny_qwen3,
                     None, {"enable_thinking": False}))
    if a.tiny_gemma3:
        runs.append(("tiny_gemma3.json", "tiny-gemma3 (dq-tool make-tiny --arch gemma3 --seed 3 "
                     "--layers 6 --dtype f32)", a.tiny_gemma3, None, {"enable_thinking": False}))
    if a.tiny_qwen3_5:
        runs.append(("tiny_qwen3_5.json", "tiny-qwen3_5 (dq-tool make-tiny --arch qwen3_5 --seed 5 "
                     "--layers 8 --dtype f32)", a.tiny_qwen3_5, None, {"enable_thinking": False}))
    if not runs:
        ap.error("name at least one model")
    for out_name, name, path, gguf_file, chat_kwargs in runs:
        result = golden(name, path, gguf_file, chat_kwargs)
        with open(os.path.join(a.out, out_name), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
