#include "decode_worker/decode_stream.h"

namespace dq::decode {
namespace v1 = dqserve::v1;

void DecodeStream::Push(int32_t token, const v1::PositionLogprobs* logprobs) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    tokens_.push_back(token);
    if (logprobs) logprobs_.push_back(*logprobs);
  }
  cv_.notify_all();
}

void DecodeStream::Finish(v1::FinishReason reason, std::string error) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    finished_ = true;
    reason_ = reason;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

void DecodeStream::SetSpecCounts(uint32_t steps, uint32_t drafted, uint32_t accepted) {
  std::lock_guard lock(mu_);
  spec_steps_ = steps;
  spec_drafted_ = drafted;
  spec_accepted_ = accepted;
}

void DecodeStream::SetDrafterPrompt(v1::DrafterPrompt source) {
  std::lock_guard lock(mu_);
  drafter_prompt_ = source;
}

bool DecodeStream::Take(std::chrono::milliseconds timeout, v1::DecodeResponse* out) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !tokens_.empty() || (finished_ && !end_delivered_); });
  if (tokens_.empty() && !(finished_ && !end_delivered_)) return false;
  out->Clear();
  out->set_request_id(request_id_);
  for (int32_t t : tokens_) out->add_token_ids(t);
  for (auto& lp : logprobs_) *out->add_logprobs() = std::move(lp);
  tokens_.clear();
  logprobs_.clear();
  out->set_spec_steps(spec_steps_);
  out->set_draft_tokens_drafted(spec_drafted_);
  out->set_draft_tokens_accepted(spec_accepted_);
  out->set_drafter_prompt(drafter_prompt_);
  if (finished_) {
    end_delivered_ = true;
    out->set_finished(true);
    out->set_finish_reason(reason_);
    out->set_error(error_);
  }
  return true;
}

bool DecodeStream::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

}  // namespace dq::decode
