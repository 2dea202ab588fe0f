#include "common/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace dq::tok_internal {

class CompiledRegex {
 public:
  CompiledRegex(pcre2_code* code, bool jit) : code_(code), jit_(jit) {}
  ~CompiledRegex() { pcre2_code_free(code_); }
  CompiledRegex(const CompiledRegex&) = delete;
  CompiledRegex& operator=(const CompiledRegex&) = delete;

  // Splits `text` into matches and the gaps between them, appending to *out.
  void Split(std::string_view text, pcre2_match_data* md, std::vector<std::string_view>* out) const;
  pcre2_code* code() const { return code_; }

 private:
  // One match at or after `start`; false when there is none (or PCRE2 gave up).
  bool Match(std::string_view text, size_t start, pcre2_match_data* md, size_t* begin,
             size_t* end) const;

  pcre2_code* code_;
  bool jit_;
};

bool CompiledRegex::Match(std::string_view text, size_t start, pcre2_match_data* md, size_t* begin,
                          size_t* end) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, 0, md, nullptr)
                : pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
    // JIT resource limits (e.g. its stack): retry with the interpreter.
    rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                     nullptr);
  }
  if (rc < 0) return false;
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
  *begin = ovector[0];
  *end = ovector[1];
  return true;
}

void CompiledRegex::Split(std::string_view text, pcre2_match_data* md,
                          std::vector<std::string_view>* out) const {
  size_t pos = 0;  // Start of the text not yet emitted.
  size_t search = 0;
  while (search < text.size()) {
    size_t begin = 0, end = 0;
    if (!Match(text, search, md, &begin, &end)) break;
    if (end == begin) {  // Empty match: step over one character and keep it in the gap.
      search = begin + 1;
      while (search < text.size() && (static_cast<uint8_t>(text[search]) & 0xC0) == 0x80) {
        ++search;
      }
      continue;
    }
    if (begin > pos) out->push_back(text.substr(pos, begin - pos));
    out->push_back(text.substr(begin, end - begin));
    pos = search = end;
  }
  if (pos < text.size()) out->push_back(text.substr(pos));
}

absl::StatusOr<RegexChain> RegexChain::Compile(const std::vector<std::string>& patterns) {
  RegexChain chain;
  chain.patterns_ = patterns;
  for (const std::string& pattern : patterns) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InvalidArgumentError(absl::StrFormat(
          "pre-tokenizer regex /%s/ does not compile at offset %d: %s; dqserve uses PCRE2, so "
          "the pattern must be PCRE2-compatible",
          pattern, offset, reinterpret_cast<const char*>(message)));
    }
    const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    chain.regexes_.push_back(std::make_shared<const CompiledRegex>(code, jit));
  }
  return chain;
}

void RegexChain::Split(std::string_view text, std::vector<std::string_view>* out) const {
  if (text.empty()) return;
  if (regexes_.empty()) {
    out->push_back(text);
    return;
  }
  std::vector<std::string_view> current{text}, next;
  for (size_t r = 0; r < regexes_.size(); ++r) {
    const CompiledRegex& regex = *regexes_[r];
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex.code(), nullptr);
    std::vector<std::string_view>* target = r + 1 == regexes_.size() ? out : &next;
    for (std::string_view piece : current) regex.Split(piece, md, target);
    pcre2_match_data_free(md);
    if (target == &next) {
      current.swap(next);
      next.clear();
    }
  }
}

}  // namespace dq::tok_internal
