// UTF-8 helpers with Python's str semantics: templates index, slice and strip strings by code
// point, and Python's notion of whitespace and line breaks is wider than ASCII's.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dq::jinja {

// Decodes the code point at s[*i] and advances *i. A byte that does not start a valid sequence
// decodes as itself (one unit), so every byte string has a well-defined code point split.
char32_t DecodeUtf8(std::string_view s, size_t* i);
void AppendUtf8(std::string* out, char32_t cp);

// Byte offsets of every code point start, plus s.size() at the end (size = count + 1).
std::vector<size_t> CodePointOffsets(std::string_view s);
size_t CodePointCount(std::string_view s);

// Python's str.isspace() for one code point.
bool IsPySpace(char32_t cp);
// The line boundaries of Python's str.splitlines() (\r\n counts as one, handled by the caller).
bool IsPyLineBreak(char32_t cp);

// Simple (one code point to one code point) case mapping for ASCII, Latin-1, Latin
// Extended-A, Greek, Cyrillic and fullwidth Latin; other code points map to themselves. Python
// also maps a few letters to several (German sharp s upper-cases to "SS"); those stay as they are.
char32_t ToUpperCp(char32_t c);
char32_t ToLowerCp(char32_t c);
char32_t ToTitleCp(char32_t c);
// Whether a code point is a cased letter as far as ToUpperCp/ToLowerCp know.
bool IsCasedCp(char32_t c);

// Byte range [begin, end) of `s` left after stripping Python whitespace (chars.empty()) or the
// code points in `chars` from the left and/or right.
std::pair<size_t, size_t> StripRange(std::string_view s, std::string_view chars, bool left,
                                     bool right, bool whitespace);

}  // namespace dq::jinja
