// Builds a Tokenizer from a model: a GGUF file's tokenizer.ggml.* metadata, or an HF checkpoint
// directory's tokenizer.json (+ tokenizer_config.json / config.json for BOS/EOS).
#pragma once

#include <string>

#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/checkpoint/gguf_file.h"

namespace dq {

// Reads tokenizer.ggml.model (must be "gpt2": byte-level BPE), tokenizer.ggml.pre (picks the
// pre-tokenizer: "gpt-2", "smollm"/"starcoder", "qwen2"/"deepseek-r1-qwen", "llama-bpe"/
// "llama3"), .tokens, .merges, .token_type (control tokens become special added tokens,
// user-defined ones non-special added tokens) and the BOS/EOS ids. The result encodes like
// the HF tokenizer.json the GGUF was converted from (NFC for qwen2; ignore_merges for llama3).
absl::StatusOr<Tokenizer> LoadTokenizerFromGguf(const GgufFile& gguf);

// Loads dir/tokenizer.json; BOS/EOS come from tokenizer_config.json's bos_token/eos_token, else
// config.json's bos_token_id/eos_token_id (the first, when a list).
absl::StatusOr<Tokenizer> LoadTokenizerFromDir(const std::string& dir);

}  // namespace dq
