#!/usr/bin/env python3
"""Builds HF `tokenizers` reference tokenizers and golden encode/decode data for dqserve.

  pip install tokenizers gguf
  python3 tests/golden/tokenizer/make_tokenizer_golden.py \
      --gguf models/SmolLM2-135M-Instruct.Q4_1.gguf

writes, next to this script:
  smollm2/tokenizer.json    SmolLM2-135M-Instruct's tokenizer (apache-2.0), rebuilt from the
                            GGUF's vocabulary/merges with the pre-tokenizer HF's SmolLM2
                            tokenizer.json specifies: Sequence[Digits(individual_digits=true),
                            ByteLevel(add_prefix_space=false, use_regex=true)], no normalizer.
  qwen-style/tokenizer.json A Qwen2/Qwen3-style tokenizer: Qwen2's NFC normalizer and
                            Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=false) over the
                            SmolLM2 vocabulary/merges, with ChatML added tokens (<think> and
                            </think> are non-special, as in Qwen3).
  */golden.json             For every test string: ids (HF encode, no post-processing), ids
                            with special tokens not parsed (encode_special_tokens=True), and
                            decode(ids) with and without skip_special_tokens; plus decode-only
                            cases of id sequences that split UTF-8 characters.

--vocab-gguf PATH --out DIR builds the same from any GPT-2-style GGUF (e.g. llama.cpp's
models/ggml-vocab-{qwen2,llama-bpe,gpt-2}.gguf) per its tokenizer.ggml.pre, for local checks.
"""
import argparse
import json
import os
import random

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers

from golden_strings import golden_strings

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_gguf_vocab(path):
    reader = gguf.GGUFReader(path)

    def field(name):
        f = reader.fields.get(name)
        return None if f is None else f.contents()

    return {
        "model": field("tokenizer.ggml.model"),
        "pre": field("tokenizer.ggml.pre"),
        "tokens": field("tokenizer.ggml.tokens"),
        "merges": field("tokenizer.ggml.merges"),
        "token_type": field("tokenizer.ggml.token_type"),
    }


def build_tokenizer(tokens, merges, pre, special_ids, extra_added=()):
    """An HF tokenizer for GGUF-style data; `pre` picks the family's HF configuration."""
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    ignore_merges = pre == "llama-bpe"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merge_pairs, ignore_merges=ignore_merges))
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    elif pre == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre in ("qwen2", "llama-bpe"):
        regex = QWEN2_REGEX if pre == "qwen2" else LLAMA3_REGEX
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                     use_regex=False)])
        if pre == "qwen2":
            tok.normalizer = normalizers.NFC()
    else:
        raise SystemExit("unsupported tokenizer.ggml.pre %r" % pre)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in special_ids])
    for content, special in extra_added:
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    return tok


def encode(tok, text, parse_special):
    tok.encode_special_tokens = not parse_special
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def decode_cases(tok, rng, count):
    """Id sequences that cut characters apart, mixed with specials and whole words."""
    vocab = tok.get_vocab(with_added_tokens=True)
    byte_tokens = [vocab[chr(c)] for c in list(range(0x80, 0xA1)) + list(range(0xA1, 0x100))
                   if chr(c) in vocab] + [vocab[chr(c)] for c in range(0x100, 0x144)
                                          if chr(c) in vocab]
    specials = sorted(i for t, i in vocab.items() if t.startswith("<") and t.endswith(">"))[:8]
    words = [vocab[w] for w in ("hello", "Ġworld", "Ċ", "Ġ", "!") if w in vocab]
    pool = byte_tokens * 3 + specials + words
    cases = []
    for _ in range(count):
        ids = [rng.choice(pool) for _ in range(rng.randint(1, 8))]
        cases.append(ids)
    cases.append([-1, 5, 10 ** 9])  # Invalid ids are skipped.
    return cases


def write_golden(tok, out_dir, strings):
    os.makedirs(out_dir, exist_ok=True)
    entries = []
    for s in strings:
        ids = encode(tok, s, parse_special=True)
        entries.append({
            "text": s,
            "ids": ids,
            "ids_no_special": encode(tok, s, parse_special=False),
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    rng = random.Random(1234)
    decodes = []
    for ids in decode_cases(tok, rng, 80):
        valid = [i for i in ids if 0 <= i < tok.get_vocab_size(with_added_tokens=True)]
        decodes.append({"ids": ids, "decoded": tok.decode(valid, skip_special_tokens=False)})
    def lines(items):
        return ",\n".join(json.dumps(i, ensure_ascii=False, separators=(",", ":")) for i in items)

    with open(os.path.join(out_dir, "golden.json"), "w", encoding="utf-8") as f:
        f.write('{"encode":[\n%s\n],\n"decode":[\n%s\n]}\n' % (lines(entries), lines(decodes)))


def save_compact(tok, path, merges_as_strings):
    """Writes tok as a compact tokenizer.json and returns the tokenizer HF loads back from it.

    The merges are written as "a b" strings (the older format, as SmolLM2's own file has) or as
    ["a", "b"] pairs (the newer one); both load identically.
    """
    data = json.loads(tok.to_str())
    if merges_as_strings:
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return Tokenizer.from_str(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", help="SmolLM2-135M-Instruct GGUF (writes the committed files)")
    ap.add_argument("--vocab-gguf", help="any GPT-2-style GGUF (local checks)")
    ap.add_argument("--out", help="output directory for --vocab-gguf")
    args = ap.parse_args()
    strings = golden_strings()
    if args.vocab_gguf:
        v = read_gguf_vocab(args.vocab_gguf)
        specials = [i for i, t in enumerate(v["token_type"]) if t == 3]
        tok = build_tokenizer(v["tokens"], v["merges"], v["pre"], specials)
        tok = save_compact(tok, os.path.join(args.out, "tokenizer.json"), True)
        write_golden(tok, args.out, strings)
        return
    if not args.gguf:
        raise SystemExit("pass --gguf PATH (SmolLM2-135M-Instruct GGUF) or --vocab-gguf")
    v = read_gguf_vocab(args.gguf)
    assert v["model"] == "gpt2" and v["pre"] == "smollm", (v["model"], v["pre"])
    specials = [i for i, t in enumerate(v["token_type"]) if t == 3]
    smol = build_tokenizer(v["tokens"], v["merges"], "smollm", specials)
    smol = save_compact(smol, os.path.join(HERE, "smollm2", "tokenizer.json"), True)
    write_golden(smol, os.path.join(HERE, "smollm2"), strings)
    chatml = [v["tokens"].index(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
    qwen = build_tokenizer(v["tokens"], v["merges"], "qwen2", chatml,
                           extra_added=[("<think>", False), ("</think>", False)])
    qwen = save_compact(qwen, os.path.join(HERE, "qwen-style", "tokenizer.json"), False)
    write_golden(qwen, os.path.join(HERE, "qwen-style"), strings)


if __name__ == "__main__":
    main()
