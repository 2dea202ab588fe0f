// Stop strings on streamed text: decides which decoded text is safe to send to the client now.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dq {

// Fed the decoded text of one sequence piece by piece, StopChecker returns the text that can be
// streamed now. It holds back any tail that could still grow into a stop string (and any
// incomplete UTF-8 character at the end), and when a stop string appears it returns the text
// before it and reports the match; the stop string itself and everything after it are dropped.
// Stop token ids and EOS are the caller's business (they end the sequence before decoding).
class StopChecker {
 public:
  struct Result {
    // Text to emit now (may be empty).
    std::string text;
    // A stop string matched: the sequence is finished (FinishReason::kStop).
    bool stopped = false;
    // Which stop string matched, when stopped.
    std::string matched;
  };

  // Empty stop strings are ignored (Validate rejects them in requests). With `min_tokens`
  // (SamplingParams::min_tokens; the caller feeds one piece per generated token), a stop string
  // stops only when it ends in the min_tokens-th piece or later, as vLLM's does; one that ends
  // earlier is ordinary text.
  explicit StopChecker(std::vector<std::string> stop_strings, int min_tokens = 0);

  // Adds `piece` to the stream. After a stop, every later call returns an empty, stopped result.
  Result Feed(std::string_view piece);

  // The sequence ended for another reason (EOS, stop token, length): returns everything still
  // held back. Empty after a stop.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t held_back() const { return pending_.size(); }

 private:
  // Emits pending_ but for what may still become a stop string or an incomplete character.
  Result Emit();
  // Length of the longest tail of pending_ that is a proper prefix of some stop string.
  size_t LongestPartialMatch() const;

  std::vector<std::string> stops_;
  std::string pending_;  // text received but not yet emitted
  bool stopped_ = false;
  int min_tokens_ = 0;
  int fed_ = 0;       // Feed calls so far
  size_t early_ = 0;  // leading bytes of pending_ from pieces before the min_tokens-th
};

}  // namespace dq
