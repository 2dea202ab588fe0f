#include "common/tokenizer/spm_pipeline.h"

#include <utility>

#include "common/tokenizer/unicode_nfc.h"
#include "common/tokenizer/utf8.h"

namespace dq::tok_internal {
namespace {

void ReplaceAll(std::string* s, std::string_view pattern, std::string_view content) {
  if (pattern.empty() || s->find(pattern) == std::string::npos) return;
  std::string out;
  out.reserve(s->size() + s->size() / 2);
  size_t at = 0;
  for (size_t hit = s->find(pattern); hit != std::string::npos; hit = s->find(pattern, at)) {
    out.append(*s, at, hit - at);
    out.append(content);
    at = hit + pattern.size();
  }
  out.append(*s, at, std::string::npos);
  *s = std::move(out);
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// HF Metaspace on one piece: spaces -> replacement, the prefix by scheme, then (split) a piece
// starting at every replacement character (SplitDelimiterBehavior::MergedWithNext).
void Metaspace(const PreTokenizerStep& step, std::string piece, bool first_piece,
               std::vector<std::string>* out) {
  const std::string& rep = step.replacement;
  ReplaceAll(&piece, " ", rep);
  const bool prepend = step.prepend == MetaspacePrepend::kAlways ||
                       (step.prepend == MetaspacePrepend::kFirst && first_piece);
  if (prepend && !piece.empty() && !StartsWith(piece, rep)) piece.insert(0, rep);
  if (piece.empty()) return;
  if (!step.split) {
    out->push_back(std::move(piece));
    return;
  }
  size_t begin = 0;
  for (size_t hit = piece.find(rep, rep.size() > 0 ? 1 : 0); hit != std::string::npos;
       hit = piece.find(rep, hit + rep.size())) {
    if (hit > begin) out->push_back(piece.substr(begin, hit - begin));
    begin = hit;
  }
  out->push_back(piece.substr(begin));
}

// HF Strip on one token (by characters).
std::string Strip(const DecoderStep& step, const std::string& token) {
  size_t begin = 0, end = token.size();
  const std::string& c = step.content;
  for (int i = 0; i < step.start && StartsWith(std::string_view(token).substr(begin), c); ++i) {
    begin += c.size();
  }
  for (int i = 0; i < step.stop && end >= begin + c.size() &&
                  std::string_view(token).substr(end - c.size(), c.size()) == c;
       ++i) {
    end -= c.size();
  }
  return token.substr(begin, end - begin);
}

// HF ByteFallback: each run of <0xNN> tokens becomes its bytes if they are valid UTF-8, else one
// U+FFFD per token.
std::vector<std::string> ByteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (IsValidUtf8(run)) {
      out.push_back(run);
    } else {
      for (size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    run.clear();
    run_tokens = 0;
  };
  for (std::string& token : tokens) {
    const int byte = ByteFallbackValue(token);
    if (byte >= 0) {
      run.push_back(static_cast<char>(byte));
      ++run_tokens;
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  return out;
}

// HF's Metaspace decoder on the token at `index`: replacement -> " ", except that the first
// token's replacement characters are dropped (prepend_scheme other than "never").
std::string MetaspaceDecode(const DecoderStep& step, const std::string& token, size_t index) {
  std::string out = token;
  const bool drop = index == 0 && step.prepend != MetaspacePrepend::kNever;
  ReplaceAll(&out, step.pattern, drop ? "" : " ");
  return out;
}

}  // namespace

int ByteFallbackValue(std::string_view token) {
  if (token.size() != 6 || !StartsWith(token, "<0x") || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int digit = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::string Normalize(std::span<const NormalizerStep> steps, std::string_view text) {
  std::string s(text);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        if (!IsNfcQuick(s)) s = NfcNormalize(s);
        break;
      case NormalizerStep::Kind::kReplace:
        ReplaceAll(&s, step.pattern, step.content);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.content);
        break;
    }
  }
  return s;
}

absl::StatusOr<SpmPreTokenizer> SpmPreTokenizer::Build(std::vector<PreTokenizerStep> steps) {
  SpmPreTokenizer pre;
  for (PreTokenizerStep& spec : steps) {
    Step step{std::move(spec), nullptr};
    if (step.spec.kind == PreTokenizerStep::Kind::kRegex) {
      DQ_ASSIGN_OR_RETURN(RegexChain chain, RegexChain::Compile({step.spec.regex}));
      step.regex = std::make_shared<const RegexChain>(std::move(chain));
    } else if (step.spec.replacement.empty()) {
      return absl::InvalidArgumentError(
          "Metaspace pre-tokenizer has an empty replacement; set it (usually \"\u2581\")");
    }
    pre.steps_.push_back(std::move(step));
  }
  return pre;
}

void SpmPreTokenizer::Split(std::string_view text, bool at_start,
                            std::vector<std::string>* out) const {
  if (text.empty()) return;
  std::vector<std::string> current{std::string(text)}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (size_t i = 0; i < current.size(); ++i) {
      if (step.regex != nullptr) {
        std::vector<std::string_view> views;
        step.regex->Split(current[i], &views);
        for (std::string_view v : views) next.emplace_back(v);
      } else {
        Metaspace(step.spec, std::move(current[i]), at_start && i == 0, &next);
      }
    }
    current.swap(next);
  }
  for (std::string& piece : current) out->push_back(std::move(piece));
}

absl::StatusOr<SpmDecoder> SpmDecoder::Build(std::vector<DecoderStep> steps) {
  SpmDecoder decoder;
  bool fused = false;
  for (const DecoderStep& step : steps) {
    if (step.kind == DecoderStep::Kind::kStrip) {
      char32_t cp;
      if (step.content.empty() ||
          DecodeUtf8(step.content, 0, &cp) != static_cast<int>(step.content.size())) {
        return absl::InvalidArgumentError(absl::StrCat("Strip decoder content \"", step.content,
                                                       "\" must be exactly one character"));
      }
      if (fused) {
        decoder.strip_start_ = step.start;
        decoder.strip_content_ = step.content;
      }
    }
    if ((step.kind == DecoderStep::Kind::kReplace || step.kind == DecoderStep::Kind::kMetaspace) &&
        step.pattern.empty()) {
      return absl::InvalidArgumentError(
          "Replace/Metaspace decoder with an empty pattern; give the string it replaces");
    }
    fused = fused || step.kind == DecoderStep::Kind::kFuse;
  }
  decoder.steps_ = std::move(steps);
  return decoder;
}

std::string SpmDecoder::Decode(std::vector<std::string> tokens) const {
  for (const DecoderStep& step : steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::kReplace:
        for (std::string& t : tokens) ReplaceAll(&t, step.pattern, step.content);
        break;
      case DecoderStep::Kind::kByteFallback:
        tokens = ByteFallback(std::move(tokens));
        break;
      case DecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::kStrip:
        for (std::string& t : tokens) t = Strip(step, t);
        break;
      case DecoderStep::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = MetaspaceDecode(step, tokens[i], i);
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string SpmDecoder::StreamBytes(std::string_view token, bool first) const {
  std::string t(token);
  bool fused = false;
  for (const DecoderStep& step : steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::kReplace:
        ReplaceAll(&t, step.pattern, step.content);
        break;
      case DecoderStep::Kind::kByteFallback:
        if (const int byte = ByteFallbackValue(t); byte >= 0 && !fused) {
          t.assign(1, static_cast<char>(byte));
        }
        break;
      case DecoderStep::Kind::kFuse:
        fused = true;
        break;
      case DecoderStep::Kind::kStrip:
        if (!fused) t = Strip(step, t);
        break;
      case DecoderStep::Kind::kMetaspace:
        t = MetaspaceDecode(step, t, first ? 0 : 1);
        break;
    }
  }
  return t;
}

}  // namespace dq::tok_internal
