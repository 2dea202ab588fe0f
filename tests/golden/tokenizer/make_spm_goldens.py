#!/usr/bin/env python3
"""Builds SentencePiece-style BPE tokenizers (byte fallback, "▁" for spaces) with HF `tokenizers`
and writes golden encode/decode data for dqserve's tokenizer_spm_test.

  /tmp/gdnvenv/bin/python tests/golden/tokenizer/make_spm_goldens.py

Each tokenizer is trained with BpeTrainer on the small multilingual TRAIN_TEXT below (so rare
characters -- most emoji, some CJK -- are not in the vocabulary and fall back to <0xNN> byte
tokens), then <0xNN> tokens are added to its vocabulary (a few left out on purpose, so that some
characters end as <unk>). Writes, next to this script:

  spm-gemma/    Gemma-style: normalizer Replace(" "->"▁"), no pre-tokenizer, decoder
                Sequence[Replace("▁"->" "), ByteFallback, Fuse]; fuse_unk=false.
  spm-llama2/   Llama-2-style: normalizer Sequence[Prepend("▁"), Replace(" "->"▁")], no
                pre-tokenizer, decoder Sequence[Replace, ByteFallback, Fuse, Strip(" ", 1, 0)];
                fuse_unk=true.
  spm-metaspace/ Metaspace(replacement "▁", prepend_scheme "first", split=true) pre-tokenizer,
                NFC normalizer, ignore_merges=true, decoder Sequence[ByteFallback, Metaspace].
  spm-metaspace-nosplit/ Metaspace(prepend_scheme "always", split=false) and the decoder
                Metaspace alone (byte tokens decode as their literal "<0xNN>" text, as in HF).

  */tokenizer.json, */golden.json (the format of make_tokenizer_golden.py: per string ids, ids
  with special tokens not parsed, decode with and without skip_special_tokens; plus decode-only
  id sequences that cut characters apart, byte tokens included).
"""
import json
import os
import random

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import trainers

from golden_strings import golden_strings

HERE = os.path.dirname(os.path.abspath(__file__))

TRAIN_TEXT = """
The quick brown fox jumps over the lazy dog. Hello world! Hello, how are you today?
It was the best of times, it was the worst of times, it was the age of wisdom.
Tokenization splits text into smaller units called tokens; byte fallback handles the rest.
def foo(x):\n    return x ** 2  # comment\n\tindented with a tab\n
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 123 2024 3.14159 1,000,000 -17 +8 50%
Le café est très bon. Où est la bibliothèque? Ça va bien, merci. élève, naïve, Noël.
Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße, schön, Mädchen.
El niño comió piña en la mañana. ¿Dónde está? ¡Hola! Señor, año, corazón.
Москва — столица России. Привет, как дела? Спасибо.
Η γρήγορη καφέ αλεπού. Καλημέρα κόσμε.
東京は日本の首都です。こんにちは世界。ありがとう。
中文分词是自然语言处理的基础。你好，世界！谢谢。
한국어 텍스트입니다. 안녕하세요.
मैं हिंदी बोलता हूँ। नमस्ते दुनिया।
مرحبا بالعالم. شكرا جزيلا.
Emoji: 😀 😂 👍 ❤️ 🎉
Multiple   spaces    here and\ttabs\tand\n\nnewlines\r\n.
""" * 3

SPECIALS = ["<unk>", "<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
            "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
NON_SPECIAL_ADDED = ["<think>", "</think>"]
# Bytes whose <0xNN> token is left out: characters needing them become <unk> (0xF0 starts every
# 4-byte emoji; 0x9F and 0xA4 continue many of them).
MISSING_BYTES = {0xF0, 0x9F, 0xA4}

EXTRA_STRINGS = [
    "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\n 你好 😀<end_of_turn>",
    "<bos>Hello", "<bos> Hello", "Hello<eos>", "<eos><eos>", " <bos> ",
    "▁", "▁▁", "▁Hello", "Hello▁world", " ▁ ", "<0x41>", "<0xE4><0xB8>",
    "\u0301", "e\u0301", "\u00e9", "ℌ", "①②③",
    " ", "  ", "   x", "x   ", "\n\n", " \n \n ", "\t\t ", "a  b   c    d",
    "😀😀😀", "👨‍👩‍👧‍👦", "🇺🇸🇫🇷", "🀄🃏", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\U0010ffff", "\x00\x01\x7f",
]


def train(normalizer, pre_tokenizer, vocab_size, seed_alphabet_limit):
    """A BPE with byte_fallback trained on TRAIN_TEXT (pieces never cross a "▁")."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizer
    # Train on Metaspace pieces, as SentencePiece does, whatever the final pre-tokenizer.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  limit_alphabet=seed_alphabet_limit, show_progress=False)
    tok.train_from_iterator(TRAIN_TEXT.splitlines(), trainer=trainer)
    tok.pre_tokenizer = pre_tokenizer
    return tok


def with_byte_tokens(tok, fuse_unk, ignore_merges=False):
    """tok's JSON with <0xNN> tokens (but MISSING_BYTES) appended to the model vocabulary."""
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        name = "<0x%02X>" % b
        if b not in MISSING_BYTES and name not in vocab:
            vocab[name] = len(vocab)
    data["model"]["fuse_unk"] = fuse_unk
    data["model"]["ignore_merges"] = ignore_merges
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


def add_tokens(tok):
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED])
    return tok


def build_all():
    replace = normalizers.Replace(" ", "▁")
    out = {}
    gemma = train(replace, None, 900, 150)
    gemma = add_tokens(with_byte_tokens(gemma, fuse_unk=False))
    gemma.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    out["spm-gemma"] = gemma

    llama = train(normalizers.Sequence([normalizers.Prepend("▁"), replace]), None, 700, 120)
    llama = add_tokens(with_byte_tokens(llama, fuse_unk=True))
    llama.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                       decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    out["spm-llama2"] = llama

    meta_pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    meta = train(normalizers.NFC(), meta_pre, 800, 140)
    meta = add_tokens(with_byte_tokens(meta, fuse_unk=False, ignore_merges=True))
    meta.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="first")])
    out["spm-metaspace"] = meta

    nosplit_pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False)
    nosplit = train(None, nosplit_pre, 600, 100)
    nosplit = add_tokens(with_byte_tokens(nosplit, fuse_unk=True))
    nosplit.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    out["spm-metaspace-nosplit"] = nosplit
    return out


def encode(tok, text, parse_special):
    tok.encode_special_tokens = not parse_special
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def decode_cases(tok, rng, count):
    """Id sequences of byte tokens (valid and broken UTF-8), ▁ pieces, specials and words."""
    vocab = tok.get_vocab(with_added_tokens=True)
    byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x")]
    utf8 = [[vocab["<0x%02X>" % b] for b in ch.encode()] for ch in "é中😀ж"
            if all("<0x%02X>" % b in vocab for b in ch.encode())]
    words = [vocab[w] for w in ("▁", "▁▁", "▁the", "Hello", "▁Hello", "<start_of_turn>",
                                "<bos>", "<think>", "<unk>") if w in vocab]
    cases = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            ids += (rng.choice(utf8) if r < 0.35 else [rng.choice(byte_ids)] if r < 0.6 else
                    [rng.choice(words)])
        cases.append(ids)
    cases += [[], [vocab["▁"]], [vocab["▁"], vocab["▁"]], [-1, 5, 10 ** 9]]
    return cases


def write_golden(tok, out_dir, strings):
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
    rng = random.Random(4321)
    decodes = []
    size = tok.get_vocab_size(with_added_tokens=True)
    for ids in decode_cases(tok, rng, 80):
        valid = [i for i in ids if 0 <= i < size]
        decodes.append({"ids": ids, "decoded": tok.decode(valid, skip_special_tokens=False)})

    def lines(items):
        return ",\n".join(json.dumps(i, ensure_ascii=False, separators=(",", ":")) for i in items)

    with open(os.path.join(out_dir, "golden.json"), "w", encoding="utf-8") as f:
        f.write('{"encode":[\n%s\n],\n"decode":[\n%s\n]}\n' % (lines(entries), lines(decodes)))


def main():
    strings = golden_strings() + [s for s in EXTRA_STRINGS if s not in golden_strings()]
    for name, tok in build_all().items():
        out_dir = os.path.join(HERE, name)
        os.makedirs(out_dir, exist_ok=True)
        text = json.dumps(json.loads(tok.to_str()), ensure_ascii=False, separators=(",", ":"))
        assert len(text.encode()) < 200_000, (name, len(text))
        with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        tok = Tokenizer.from_str(text)
        write_golden(tok, out_dir, strings)
        print(name, tok.get_vocab_size(with_added_tokens=True), "tokens,", len(strings),
              "strings")


if __name__ == "__main__":
    main()
