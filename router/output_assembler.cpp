#include "router/output_assembler.h"

#include <utility>

#include "router/utf8.h"

namespace dq::router {
namespace v1 = dqserve::v1;

std::string TokenString(const Tokenizer& tokenizer, int32_t id) {
  return ToValidUtf8(tokenizer.TokenBytes(id));
}

v1::PositionLogprobs WithTokenStrings(const Tokenizer& tokenizer, v1::PositionLogprobs lp) {
  lp.mutable_chosen()->set_token(TokenString(tokenizer, lp.chosen().token_id()));
  for (v1::TokenLogprob& t : *lp.mutable_top()) t.set_token(TokenString(tokenizer, t.token_id()));
  return lp;
}

TokenLogprobs ToTokenLogprobs(const Tokenizer& tokenizer, const v1::PositionLogprobs& lp) {
  TokenLogprobs out;
  out.bytes = std::string(tokenizer.TokenBytes(lp.chosen().token_id()));
  out.logprob = lp.chosen().logprob();
  out.top.reserve(lp.top_size());
  for (const v1::TokenLogprob& t : lp.top()) {
    out.top.push_back(
        LogprobCandidate{std::string(tokenizer.TokenBytes(t.token_id())), t.logprob()});
  }
  return out;
}

std::vector<TokenLogprobs> PromptTokenLogprobs(const Tokenizer& tokenizer,
                                               std::span<const int32_t> prompt,
                                               std::span<const v1::PositionLogprobs> lps) {
  std::vector<TokenLogprobs> out;
  out.reserve(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (i == 0 || i - 1 >= lps.size()) {
      TokenLogprobs t;
      t.bytes = std::string(tokenizer.TokenBytes(prompt[i]));
      out.push_back(std::move(t));  // no logprob: nothing precedes the first token
    } else {
      out.push_back(ToTokenLogprobs(tokenizer, lps[i - 1]));
    }
  }
  return out;
}

OutputAssembler::OutputAssembler(Tokenizer tokenizer, std::vector<std::string> stop_strings,
                                 std::vector<int32_t> keep_special, int min_tokens)
    : tokenizer_(tokenizer),
      detokenizer_(std::move(tokenizer), /*skip_special=*/true, std::move(keep_special)),
      stops_(std::move(stop_strings), min_tokens) {}

bool OutputAssembler::Feed(int32_t id, const v1::PositionLogprobs* logprobs, Delta* delta) {
  if (stops_.stopped()) return true;
  ++tokens_;
  delta->token_ids.push_back(id);
  if (logprobs != nullptr) delta->logprobs.push_back(WithTokenStrings(tokenizer_, *logprobs));
  StopChecker::Result r = stops_.Feed(detokenizer_.Next(id));
  delta->text += r.text;
  if (r.stopped) matched_ = std::move(r.matched);
  return r.stopped;
}

bool OutputAssembler::Finish(Delta* delta) {
  if (stops_.stopped()) return true;
  StopChecker::Result r = stops_.Feed(detokenizer_.Flush());
  delta->text += r.text;
  if (r.stopped) {
    matched_ = std::move(r.matched);
    return true;
  }
  delta->text += stops_.Flush();
  return false;
}

}  // namespace dq::router
