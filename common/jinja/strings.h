// Python's str operations over provenance-carrying strings: the pieces of the result that were
// copied from a user string stay marked as user content.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/jinja/value.h"

namespace dq::jinja {

// str.strip/lstrip/rstrip: `whitespace` strips Python whitespace, otherwise code points in
// `chars`.
Str StripStr(const Str& s, std::string_view chars, bool left, bool right, bool whitespace);
// str.split/rsplit; `whitespace` is sep=None (runs of whitespace, no empty parts).
std::vector<Str> SplitStr(const Str& s, std::string_view sep, int64_t maxsplit, bool whitespace,
                          bool from_right);
// str.replace; count < 0 replaces all.
Str ReplaceStr(const Str& s, std::string_view old, const Str& replacement, int64_t count);
// str.splitlines.
std::vector<Str> SplitLines(const Str& s, bool keepends);
// str.upper/lower/title/capitalize/swapcase, for ASCII letters (other code points unchanged).
Str CaseMap(const Str& s, std::string_view mode);
// jinja2's title filter: capitalises each word, words split at whitespace and -([{<.
Str JinjaTitle(const Str& s);
// markupsafe's escape: & < > " ' as HTML entities.
Str HtmlEscape(const Str& s);
// str.isdigit/isalpha/isalnum/isspace/isupper/islower (ASCII letters and digits).
bool CharClassTest(std::string_view s, std::string_view mode);

}  // namespace dq::jinja
