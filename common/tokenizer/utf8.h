// UTF-8 helpers and the GPT-2 byte-to-unicode mapping shared by the tokenizer's pieces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dq::tok_internal {

// Decodes the UTF-8 sequence starting at s[i] into *cp. Returns its length (1-4), or 0 when the
// bytes at i are not a complete, well-formed sequence (overlongs and surrogates are invalid).
int DecodeUtf8(std::string_view s, size_t i, char32_t* cp);

// Appends the UTF-8 encoding of cp (cp must be a scalar value).
void AppendUtf8(char32_t cp, std::string* out);

// True when `s` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

// Appends `bytes` to *out with every ill-formed subsequence replaced by U+FFFD, one per
// maximal subpart (the Unicode-recommended practice, identical to Rust's from_utf8_lossy,
// which HF tokenizers' decoders use).
void AppendUtf8Lossy(std::string_view bytes, std::string* out);

// The number of trailing bytes of `bytes` that form an incomplete but so far well-formed
// UTF-8 sequence (0-3): bytes a later chunk may still complete.
size_t IncompleteUtf8TailLen(std::string_view bytes);

// GPT-2's reversible byte <-> unicode mapping: printable bytes map to themselves, the rest to
// U+0100 and up (space -> 'Ġ' U+0120, newline -> 'Ċ' U+010A).
char32_t ByteToUnicode(uint8_t byte);
// The byte a mapped code point stands for, or -1 when cp is not in the mapping's image.
int UnicodeToByte(char32_t cp);

// Appends the byte-level form of raw `bytes` (each byte as the UTF-8 of ByteToUnicode).
void AppendByteLevel(std::string_view bytes, std::string* out);

// HF's ByteLevel decoder for one token: when every character of `token` is in the mapping's
// image, the bytes they stand for; otherwise the token's own UTF-8 bytes, unchanged.
std::string ByteLevelDecodeToken(std::string_view token);

}  // namespace dq::tok_internal
