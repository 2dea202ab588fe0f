#!/usr/bin/env python3
"""The DFlash drafter's forward pass in PyTorch, written from the published description
(docs/speculative.md#dflash), checked against dqserve's (engine/spec/dflash_drafter.cpp).

Inputs: the target checkpoint directory (safetensors: its embeddings, lm_head or tied embeddings,
final norm), the DFlash checkpoint directory, and the file `dq-tool dflash-dump` wrote: the
target's hidden states at the drafter's target layers for some tokens ("features", captured by
dqserve's target forward) and dqserve's drafter logits for two blocks ("logits_a": context
[0, split), anchor tokens[split]; "logits_b": context [0, n - 1), anchor tokens[n - 1]).

Each block is recomputed from scratch (no cache), so the comparison also covers dqserve's
incremental context cache. Prints max |diff| and top-1 agreement per block; exits 1 when a
block's max |diff| exceeds --tol (relative to the logits' scale) or top-1 agreement is below
--min-top1.
"""
import argparse
import json
import math
import struct
import sys
from pathlib import Path

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32}


def read_safetensors(path):
    """A .safetensors file: u64 header length, JSON header, raw little-endian tensors."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0)
        out[name] = t.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


def read_dir(path):
    tensors = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        tensors.update(read_safetensors(f)[0])
    return tensors


def lookup(cfg, key, default=None):
    """The published loaders read dflash_config.<key> first, then the top-level key."""
    inner = cfg.get("dflash_config") or {}
    if inner.get(key) is not None:
        return inner[key]
    return cfg.get(key, default)


def rms_norm(x, w, eps):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def rope(x, positions, theta):
    """HF rotary embedding (rotate_half over dimension pairs (i, i + d/2)); x: [heads, T, d]."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    ang = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * cos + half * sin


class Drafter:
    def __init__(self, draft_dir, target_dir, device):
        self.cfg = json.loads((Path(draft_dir) / "config.json").read_text())
        self.tcfg = json.loads((Path(target_dir) / "config.json").read_text())
        w = {k: v.to(device).double() for k, v in read_dir(draft_dir).items()}
        t = read_dir(target_dir)
        self.w = w
        self.embed = t["model.embed_tokens.weight"].to(device).double()
        self.lm_head = (t["lm_head.weight"].to(device).double() if "lm_head.weight" in t
                        else self.embed)
        self.target_norm = t["model.norm.weight"].to(device).double()
        c = self.cfg
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.teps = self.tcfg.get("rms_norm_eps", 1e-6)
        self.theta = (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta", 1e4))
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        self.block = int(lookup(c, "block_size", 16))
        self.mask = int(lookup(c, "mask_token_id"))
        self.ids = list(lookup(c, "target_layer_ids"))
        self.device = device

    def context(self, features):
        """hidden_norm(fc(concat of the target layers' states)). HF's hidden_states[i + 1] is
        layer i's output, except the last entry, which is after the target's final norm."""
        h = self.tcfg["hidden_size"]
        parts = []
        for j, layer in enumerate(self.ids):
            f = features[:, j * h:(j + 1) * h].double()
            if layer == self.tcfg["num_hidden_layers"] - 1:
                f = rms_norm(f, self.target_norm, self.teps)
            parts.append(f)
        x = torch.cat(parts, dim=-1) @ self.w["fc.weight"].T
        return rms_norm(x, self.w["hidden_norm.weight"], self.eps)

    def block_logits(self, features, anchor):
        """Logits for block positions 1 .. block - 1 of the block [anchor, mask...] that follows
        the context (one row of features per earlier position)."""
        ctx = self.context(features)
        n_ctx = ctx.shape[0]
        tokens = torch.tensor([anchor] + [self.mask] * (self.block - 1), device=self.device)
        x = self.embed[tokens]
        pos_ctx = torch.arange(n_ctx, device=self.device)
        pos_blk = torch.arange(n_ctx, n_ctx + self.block, device=self.device)
        hd, group = self.head_dim, self.heads // self.kv_heads
        for i in range(self.layers):
            p = f"layers.{i}."
            w = lambda name: self.w[p + name]  # noqa: E731
            h = rms_norm(x, w("input_layernorm.weight"), self.eps)
            q = (h @ w("self_attn.q_proj.weight").T).view(self.block, self.heads, hd)
            q = rms_norm(q, w("self_attn.q_norm.weight"), self.eps).transpose(0, 1)
            # K/V over [context; block]: the context is not layer-normed, only projected.
            kv_in = torch.cat([ctx, h], dim=0)
            k = (kv_in @ w("self_attn.k_proj.weight").T).view(-1, self.kv_heads, hd)
            v = (kv_in @ w("self_attn.v_proj.weight").T).view(-1, self.kv_heads, hd)
            k = rms_norm(k, w("self_attn.k_norm.weight"), self.eps).transpose(0, 1)
            v = v.transpose(0, 1)
            q = rope(q, pos_blk, self.theta)
            k = rope(k, torch.cat([pos_ctx, pos_blk]), self.theta)
            k = k.repeat_interleave(group, dim=0)
            v = v.repeat_interleave(group, dim=0)
            # Non-causal: every block query sees the whole context and the whole block.
            att = torch.softmax((q @ k.transpose(1, 2)) / math.sqrt(hd), dim=-1)
            o = (att @ v).transpose(0, 1).reshape(self.block, self.heads * hd)
            x = x + o @ w("self_attn.o_proj.weight").T
            h = rms_norm(x, w("post_attention_layernorm.weight"), self.eps)
            g = h @ w("mlp.gate_proj.weight").T
            u = h @ w("mlp.up_proj.weight").T
            x = x + (torch.nn.functional.silu(g) * u) @ w("mlp.down_proj.weight").T
        x = rms_norm(x, self.w["norm.weight"], self.eps)
        return (x @ self.lm_head.T)[1:]


def compare(name, ours, ref, tol, min_top1):
    ours = ours.double()
    diff = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    top1 = (ours.argmax(-1) == ref.argmax(-1)).double().mean().item()
    ok = diff <= tol * max(scale, 1.0) and top1 >= min_top1
    print(f"{name}: rows {ref.shape[0]} vocab {ref.shape[1]} max|diff| {diff:.3e} "
          f"(logit scale {scale:.3f}) top-1 agreement {top1:.3f} -> {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, help="target checkpoint dir (safetensors)")
    ap.add_argument("--draft", required=True, help="DFlash checkpoint dir")
    ap.add_argument("--dump", required=True, help="dq-tool dflash-dump output")
    ap.add_argument("--tol", type=float, default=2e-3, help="max |diff| / logit scale")
    ap.add_argument("--min-top1", type=float, default=1.0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    dump, meta = read_safetensors(a.dump)
    split = int(meta["split"])
    tokens = dump["tokens"].tolist()
    n = len(tokens)
    features = dump["features"].to(a.device)
    d = Drafter(a.draft, a.target, a.device)
    print(f"device {a.device}, torch {torch.__version__}; {n} tokens, split {split}, block "
          f"{d.block}, target layers {d.ids}, {d.layers} draft layers")
    ok = compare("block a", dump["logits_a"].to(a.device),
                 d.block_logits(features[:split], tokens[split]), a.tol, a.min_top1)
    ok &= compare("block b", dump["logits_b"].to(a.device),
                  d.block_logits(features[:n - 1], tokens[n - 1]), a.tol, a.min_top1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
