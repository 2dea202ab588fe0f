"""Gated DeltaNet's golden from HF transformers (issue 21). Seeded random inputs, on the CPU in
float32 (as the model's kernels compute), through:
  - torch_chunk_gated_delta_rule and torch_recurrent_gated_delta_rule of transformers'
    models/qwen3_5 (models/qwen3_next where there is no qwen3_5), with q and k L2-normalized inside
    (use_qk_l2norm_in_kernel=True, as the layer calls them), with and without an initial state,
    several heads, lengths that are not a multiple of the chunk, one grouped case (fewer q/k heads
    than v heads), one chunk of 16 and one case with the model's strong decays;
  - the causal conv1d + SiLU the layer runs (causal_conv1d_fn for prefill, causal_conv1d_update for
    decode from the cached state);
  - the layer's gated RMSNorm module (Qwen3_5RMSNormGated);
  - one whole Qwen3_5GatedDeltaNet layer (random weights, no cache), for composing the pieces.
Each GDN case also records the max error of HF's fp32 outputs against a float64 recurrence written
here, the scale of fp32 rounding that the C++ test's tolerances rest on.
Writes gdn_hf.json (tensors as base64 of little-endian float32); read by
tests/unit/engine/gated_delta_golden_test.cpp. Needs torch and transformers (no GPU: it runs on
the CPU, and keeps FLA / causal-conv1d out): python3 tests/golden/gdn/make_gdn_golden.py [OUT].
The committed gdn_hf.json: torch 2.11.0 (PyPI wheel, on the CPU), transformers 5.17.0."""
import array
import base64
import importlib
import inspect
import json
import os
import sys

# The torch fallbacks are the reference: keep the optional fast packages (FLA's Triton kernels,
# causal-conv1d) from being picked up by transformers' hub decorators.
for _pkg in ("fla", "causal_conv1d"):
    sys.modules[_pkg] = None
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

torch.set_default_dtype(torch.float32)


def b64(t):
    a = array.array("f", t.detach().to("cpu", torch.float32).reshape(-1).tolist())
    if sys.byteorder != "little":
        a.byteswap()
    return base64.b64encode(a.tobytes()).decode("ascii")


def where(fn):
    fn = inspect.unwrap(fn)
    if not hasattr(fn, "__qualname__"):
        return repr(fn)
    try:
        src = os.path.relpath(inspect.getsourcefile(fn), os.path.dirname(transformers.__file__))
    except (TypeError, ValueError):
        src = "?"
    return f"{fn.__module__}.{fn.__qualname__} ({src})"


def modeling():
    for name in ("qwen3_5", "qwen3_next"):
        try:
            m = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except ImportError:
            continue
        if hasattr(m, "torch_chunk_gated_delta_rule"):
            return name, m
    raise SystemExit("no torch_chunk_gated_delta_rule in this transformers")


def torch_fallback(m, name):
    fn = getattr(m, name)
    if not (getattr(inspect.unwrap(fn), "__module__", None) or "").startswith("transformers."):
        raise SystemExit(f"{name} resolves to {where(fn)}, not transformers' torch code")
    return fn


def l2norm64(x, eps=1e-6):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrence64(q, k, v, g, beta, state):
    """The gated delta rule in float64, token by token; q, k already repeated to v's heads.
    [T, H, d] inputs, state [H, dk, dv]."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    q = l2norm64(q) / q.shape[-1] ** 0.5
    k = l2norm64(k)
    s = state.double().clone()
    out = torch.zeros_like(v)
    for t in range(q.shape[0]):
        s = s * g[t].exp()[:, None, None]
        kv = torch.einsum("hkv,hk->hv", s, k[t])
        d = (v[t] - kv) * beta[t][:, None]
        s = s + k[t][:, :, None] * d[:, None, :]
        out[t] = torch.einsum("hkv,hk->hv", s, q[t])
    return out, s


def gdn_case(m, name, tokens, k_heads, v_heads, dk, dv, chunk, with_state, model_decay=False):
    q = torch.randn(1, tokens, k_heads, dk)
    k = torch.randn(1, tokens, k_heads, dk)
    v = torch.randn(1, tokens, v_heads, dv)
    if model_decay:
        # The layer's gates: g = -exp(A_log) softplus(a + dt_bias), A in (0.01, 16) as it inits.
        a_log = torch.empty(v_heads).uniform_(0.01, 16).log()
        g = -a_log.exp() * F.softplus(torch.randn(1, tokens, v_heads) + 1.0)
    else:
        g = -0.5 * F.softplus(torch.randn(1, tokens, v_heads))
    beta = torch.sigmoid(torch.randn(1, tokens, v_heads))
    state = 0.3 * torch.randn(1, v_heads, dk, dv)
    chunk_rule = torch_fallback(m, "torch_chunk_gated_delta_rule")
    recurrent_rule = torch_fallback(m, "torch_recurrent_gated_delta_rule")
    rep = v_heads // k_heads
    q64, k64 = (x[0].repeat_interleave(rep, dim=1) for x in (q, k))
    case = {
        "name": name, "tokens": tokens, "k_heads": k_heads, "v_heads": v_heads, "dk": dk,
        "dv": dv, "chunk": chunk,
        "q": b64(q), "k": b64(k), "v": b64(v), "g": b64(g), "beta": b64(beta),
        "initial_state": b64(state), "runs": [],
    }
    qh, kh = q, k
    if rep > 1:
        try:  # newer modeling code maps value heads to q/k heads inside the rule
            chunk_rule(q, k, v, g, beta, chunk_size=chunk)
            recurrent_rule(q, k, v, g, beta)
        except Exception as e:  # older: the layer repeats q/k heads before the call
            print(f"{name}: the rules take no grouped heads ({type(e).__name__}); repeating")
            qh, kh = (x.repeat_interleave(rep, dim=2) for x in (q, k))
            case["repeated_by_script"] = True
    for init in with_state:
        s0 = state.clone() if init else None
        kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)
        o_c, s_c = chunk_rule(qh, kh, v, g, beta, chunk_size=chunk, initial_state=s0, **kw)
        s0 = state.clone() if init else None
        o_r, s_r = recurrent_rule(qh, kh, v, g, beta, initial_state=s0, **kw)
        o64, s64 = recurrence64(q64, k64, v[0], g[0], beta[0],
                                state[0] if init else torch.zeros(v_heads, dk, dv))
        err = lambda a, b: float((a.double().reshape(b.shape) - b).abs().max())  # noqa: E731
        case["runs"].append({
            "initial_state": init,
            "chunk_out": b64(o_c), "chunk_state": b64(s_c),
            "recurrent_out": b64(o_r), "recurrent_state": b64(s_r),
            "max_abs_out": float(o64.abs().max()), "max_abs_state": float(s64.abs().max()),
            "hf_fp32_vs_fp64": {
                "chunk_out": err(o_c, o64), "chunk_state": err(s_c, s64),
                "recurrent_out": err(o_r, o64), "recurrent_state": err(s_r, s64)},
        })
        print(f"{name} init={init}: max|out| {o64.abs().max():.3g}, hf fp32 vs fp64 "
              f"{case['runs'][-1]['hf_fp32_vs_fp64']}")
    return case


def conv_golden(m, channels=24, kernel=4, tokens=10, split=6):
    conv = torch.nn.Conv1d(channels, channels, kernel, groups=channels, bias=False,
                           padding=kernel - 1)
    w = conv.weight.detach().squeeze(1)  # [channels][kernel]
    x = torch.randn(1, tokens, channels)
    xt = x.transpose(1, 2)  # [1][channels][tokens], as the layer transposes mixed_qkv
    if hasattr(m, "causal_conv1d_fn"):
        fn = torch_fallback(m, "causal_conv1d_fn")
        prefill = lambda h: fn(h, w, None, activation="silu")  # noqa: E731
        prefill_name = where(fn)
    else:  # the layer's own module, as older modeling code calls it
        prefill = lambda h: F.silu(conv(h)[:, :, : h.shape[-1]])  # noqa: E731
        prefill_name = "F.silu(nn.Conv1d(groups=channels, padding=kernel - 1))[..., :T]"
    update_name = next(n for n in ("causal_conv1d_update", "torch_causal_conv1d_update")
                       if hasattr(m, n))
    update = torch_fallback(m, update_name)
    whole = prefill(xt)
    # Decode as the cache does: conv_state holds the last `kernel` inputs (zeros before the
    # sequence), and each token goes through causal_conv1d_update.
    first = prefill(xt[:, :, :split])
    conv_state = F.pad(xt[:, :, :split], (kernel - split, 0)) if split < kernel \
        else xt[:, :, split - kernel:split].clone()
    steps = [first]
    for t in range(split, tokens):
        steps.append(update(xt[:, :, t:t + 1].clone(), conv_state, w, None, "silu"))
    split_out = torch.cat(steps, dim=-1)
    return {
        "channels": channels, "kernel": kernel, "tokens": tokens, "split": split,
        "prefill": prefill_name, "decode": where(update),
        "layout": "x, out [tokens][channels]; weight [channels][kernel]; state [channels][kernel]",
        "x": b64(x), "weight": b64(w),
        "prefill_out": b64(whole.transpose(1, 2)), "split_out": b64(split_out.transpose(1, 2)),
        "final_conv_state": b64(conv_state[0]),
    }


def norm_golden(m, rows=14, dim=32, eps=1e-6):
    cls_name = next(n for n in ("Qwen3_5RMSNormGated", "Qwen3NextRMSNormGated") if hasattr(m, n))
    norm = getattr(m, cls_name)(dim, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.5 * torch.randn(dim))
    x = torch.randn(rows, dim)
    z = 2.0 * torch.randn(rows, dim)
    out = norm(x, z)
    return {"module": f"{m.__name__}.{cls_name}", "rows": rows, "dim": dim, "eps": eps,
            "x": b64(x), "z": b64(z), "weight": b64(norm.weight), "out": b64(out)}


def layer_golden(module_name, m, tokens=70):
    if module_name != "qwen3_5":
        return None
    cfg_mod = importlib.import_module("transformers.models.qwen3_5.configuration_qwen3_5")
    dims = dict(hidden_size=32, linear_num_key_heads=1, linear_num_value_heads=2,
                linear_key_head_dim=16, linear_value_head_dim=32, linear_conv_kernel_dim=4)
    cfg = cfg_mod.Qwen3_5TextConfig(
        num_hidden_layers=1, layer_types=["linear_attention"], num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, vocab_size=64,
        hidden_act="silu", rms_norm_eps=1e-6, **dims)
    layer = m.Qwen3_5GatedDeltaNet(cfg, layer_idx=0).eval()
    with torch.no_grad():
        layer.dt_bias.copy_(torch.randn(layer.dt_bias.shape))
        layer.norm.weight.copy_(1.0 + 0.5 * torch.randn(layer.norm.weight.shape))
        layer.conv1d.weight.copy_(0.5 * torch.randn(layer.conv1d.weight.shape))
        x = torch.randn(1, tokens, dims["hidden_size"])
        out = layer(x)
        out = out[0] if isinstance(out, tuple) else out
    weights = {n: {"shape": list(p.shape), "data": b64(p)} for n, p in layer.named_parameters()}
    return {"module": f"{m.__name__}.Qwen3_5GatedDeltaNet", "tokens": tokens,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", **dims,
            "note": "no cache: the chunked rule from a zero state; Linear weights [out][in]; "
                    "conv1d.weight [conv_dim][1][kernel]; conv channels q|k|v",
            "x": b64(x), "out": b64(out), "weights": weights}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                            "gdn_hf.json")
    module_name, m = modeling()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"modeling {m.__name__}")
    for n in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
              "causal_conv1d_fn", "causal_conv1d_update", "torch_causal_conv1d_update", "l2norm"):
        if hasattr(m, n):
            print(f"  {n}: {where(getattr(m, n))}")
    print("  classes:", [n for n in dir(m) if "Norm" in n or "GatedDelta" in n])
    torch.manual_seed(20261202)
    both = (False, True)
    cases = [gdn_case(m, f"t{t}", t, 2, 2, 16, 32, 64, both) for t in (1, 7, 64, 100)]
    cases.append(gdn_case(m, "grouped_t40", 40, 1, 2, 16, 32, 64, (True,)))
    cases.append(gdn_case(m, "chunk16_t50", 50, 2, 2, 16, 32, 16, (True,)))
    cases.append(gdn_case(m, "model_decay_t70", 70, 2, 2, 16, 32, 64, (True,), model_decay=True))
    golden = {
        "source": f"transformers {transformers.__version__}, models/{module_name}",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "script": "tests/golden/gdn/make_gdn_golden.py", "device": "cpu, float32",
        "functions": {n: where(getattr(m, n)) for n in (
            "torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")},
        "encoding": "base64 of little-endian float32",
        "gdn_layout": "q, k [tokens][k_heads][dk] (raw: the rule L2-normalizes them, eps 1e-6); "
                      "v, out [tokens][v_heads][dv]; g (log decay), beta [tokens][v_heads]; "
                      "states [v_heads][dk][dv]; v head h reads q/k head h / (v_heads / k_heads)",
        "gdn": cases,
    }
    for key, make in (("conv", lambda: conv_golden(m)), ("rms_norm_gated", lambda: norm_golden(m)),
                      ("layer", lambda: layer_golden(module_name, m))):
        try:
            golden[key] = make()
        except Exception as e:  # the rule's cases stand without it; the C++ test says it's missing
            import traceback
            traceback.print_exc()
            print(f"{key} golden skipped: {type(e).__name__}: {e}")
            golden[key] = None
    with open(out, "w") as f:
        json.dump(golden, f)
    print(f"wrote {out} ({os.path.getsize(out)} bytes): {golden['source']}")


if __name__ == "__main__":
    main()
