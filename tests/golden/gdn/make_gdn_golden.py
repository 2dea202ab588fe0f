"""The gated delta rule's golden from HF transformers (issue 21): seeded random inputs through
transformers' torch_chunk_gated_delta_rule and torch_recurrent_gated_delta_rule (Qwen3.5's
modeling module; Qwen3-Next's where it has none), with q and k L2-normalized inside (the
layer's use_qk_l2norm_in_kernel) and a random initial state. Writes gdn_hf.json beside this
file; tests/unit/engine/gated_delta_test.cpp reads it. Run on the GPU machine (it has torch and
transformers): python3 tests/golden/gdn/make_gdn_golden.py [OUT]"""
import importlib
import json
import os
import sys

import torch
import torch.nn.functional as F
import transformers


def rules():
    for name in ("qwen3_5", "qwen3_next"):
        try:
            m = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except ImportError:
            continue
        if hasattr(m, "torch_chunk_gated_delta_rule"):
            return name, m.torch_chunk_gated_delta_rule, m.torch_recurrent_gated_delta_rule
    raise SystemExit("no torch_chunk_gated_delta_rule in this transformers")


def flat(t):
    return [float(x) for x in t.detach().to(torch.float32).reshape(-1).tolist()]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                            "gdn_hf.json")
    module, chunk_rule, recurrent_rule = rules()
    torch.manual_seed(20261202)
    heads, dk, dv, tokens = 2, 16, 8, 150
    q = torch.randn(1, tokens, heads, dk)
    k = torch.randn(1, tokens, heads, dk)
    v = torch.randn(1, tokens, heads, dv)
    g = -0.5 * F.softplus(torch.randn(1, tokens, heads))  # log decays, as -exp(A) softplus(a)
    beta = torch.sigmoid(torch.randn(1, tokens, heads))
    state = 0.3 * torch.randn(1, heads, dk, dv)
    args = dict(initial_state=state.clone(), output_final_state=True,
                use_qk_l2norm_in_kernel=True)
    o_chunk, s_chunk = chunk_rule(q, k, v, g, beta, chunk_size=64, **args)
    args["initial_state"] = state.clone()
    o_rec, s_rec = recurrent_rule(q, k, v, g, beta, **args)
    golden = {
        "source": f"transformers {transformers.__version__}, models/{module}",
        "script": "tests/golden/gdn/make_gdn_golden.py",
        "heads": heads, "dk": dk, "dv": dv, "tokens": tokens, "chunk": 64,
        "l2norm_eps": 1e-6,
        "layout": "q, k [tokens][heads][dk]; v, out [tokens][heads][dv]; g, beta "
                  "[tokens][heads]; state [heads][dk][dv]",
        "q": flat(q), "k": flat(k), "v": flat(v), "g": flat(g), "beta": flat(beta),
        "initial_state": flat(state),
        "chunk_out": flat(o_chunk), "chunk_state": flat(s_chunk),
        "recurrent_out": flat(o_rec), "recurrent_state": flat(s_rec),
    }
    with open(out, "w") as f:
        json.dump(golden, f)
    print(f"wrote {out}: {golden['source']}; max |chunk - recurrent| "
          f"{(o_chunk - o_rec).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
