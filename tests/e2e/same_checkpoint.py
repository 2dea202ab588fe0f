#!/usr/bin/env python3
"""Compares two dq-quantize outputs tensor by tensor: same names, dtypes and shapes; every
tensor byte-identical except the zero-centred norms (a GGUF stores 1 + w, so w comes back as
fl(1 + w) - 1: compared as 1 + w in f32, the values a model multiplies by) and A_log (a GGUF
stores -exp(A_log): compared within 1e-6). Prints the counts; exits non-zero on a difference.

Usage: same_checkpoint.py DIR_A DIR_B
"""
import json
import struct
import sys

import numpy as np


def tensors(d: str) -> dict:
    data = open(d + "/model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8:8 + n])
    h.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items()}


def main() -> None:
    a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    counts = {"identical": 0, "norm": 0, "A_log": 0}
    for k in sorted(a):
        assert a[k][:2] == b[k][:2], (k, a[k][:2], b[k][:2])
        if a[k][2] == b[k][2]:
            counts["identical"] += 1
            continue
        assert a[k][0] == "F32", (k, a[k][0])
        x, y = (np.frombuffer(t[2], dtype=np.float32) for t in (a[k], b[k]))
        if k.endswith("norm.weight") and not k.endswith("linear_attn.norm.weight"):
            one = np.float32(1.0)
            assert np.array_equal(x + one, y + one), (k, np.abs(x - y).max())
            counts["norm"] += 1
        elif k.endswith(".A_log"):
            assert np.allclose(x, y, rtol=1e-6, atol=1e-6), (k, np.abs(x - y).max())
            counts["A_log"] += 1
        else:
            sys.exit(f"tensor {k} differs")
    print(f"{len(a)} tensors: {counts['identical']} byte-identical, {counts['norm']} norms equal "
          f"as 1 + w, {counts['A_log']} A_log within 1e-6")


if __name__ == "__main__":
    main()
