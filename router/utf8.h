// UTF-8 checks for text that crosses the API boundary. JSON must carry valid UTF-8, and the
// tokenizer and chat template assume it, so the router checks every string it accepts and
// repairs every token string it emits (a byte-level BPE token can be half a character).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dq::router {

// Where and why a byte string stops being well-formed UTF-8 (RFC 3629 / Unicode 15, table 3-7).
struct Utf8Problem {
  size_t offset = 0;      // byte offset of the first byte of the ill-formed sequence
  std::string_view what;  // e.g. "overlong encoding", "UTF-16 surrogate", "truncated sequence"
};

// True when `s` is entirely well-formed UTF-8; otherwise false and, when `problem` is given,
// the first ill-formed sequence. Overlong forms, surrogates (U+D800..U+DFFF), code points past
// U+10FFFF, stray continuation bytes and truncated sequences are all ill-formed.
bool IsValidUtf8(std::string_view s, Utf8Problem* problem = nullptr);

// `bytes` with every ill-formed subsequence replaced by U+FFFD, one per maximal subpart (the
// Unicode-recommended practice; what Python's bytes.decode(errors="replace") does).
std::string ToValidUtf8(std::string_view bytes);

// The number of code points in valid UTF-8 `s` (what a Python client's len(str) returns).
size_t CountCodePoints(std::string_view s);

}  // namespace dq::router
