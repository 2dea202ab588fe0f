// Streams decoded text one token id at a time without ever emitting a broken UTF-8 sequence:
// bytes that may still become a character are held back until a later token completes them.
// The concatenation of every Next() and the final Flush() equals Tokenizer::Decode(all ids)
// (SentencePiece-style tokenizers: see tokenizer.h for the two exceptions). Byte-fallback
// tokens (<0xNN>) stream as their raw bytes, so a character split over several of them comes
// out once complete; the first token and a Strip decoder's leading characters are handled as
// Decode does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace dq {

class IncrementalDetokenizer {
 public:
  // Keeps a (cheap, shared) copy of `tokenizer`. `keep_special`: special ids decoded even with
  // skip_special (the router's tool-call markers, such as Llama's <|python_tag|>).
  explicit IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special = false,
                                  std::vector<int32_t> keep_special = {});

  // Feeds one id; returns the text it completed (possibly empty). Ids out of range are skipped,
  // special ids too when skip_special. Ill-formed bytes that can no longer become a character
  // come out as U+FFFD.
  std::string Next(int32_t id);

  // Ends the stream: returns the held-back bytes, an incomplete sequence as U+FFFD, and resets.
  std::string Flush();

  // Drops held-back bytes and starts a new stream.
  void Reset();

  // Bytes held back waiting for the rest of a character (0-3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::vector<int32_t> keep_special_;
  std::string pending_;
  bool first_ = true;   // No token decoded yet.
  int strip_left_ = 0;  // Leading strip_content() characters still to drop.

  // Drops leading strip characters from `text` while strip_left_ lasts.
  void ApplyStrip(std::string* text);
};

}  // namespace dq
