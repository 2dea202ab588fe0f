// The channel between the decode engine thread (producer) and one Decode RPC's handler thread
// (consumer): tokens, their logprobs, and the end of the stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "dqserve/v1/worker.pb.h"

namespace dq::decode {

// Thread-safe. The engine never waits on the reader: tokens pile up until the handler takes
// them, so a slow client costs only its own stream (several tokens per response).
class DecodeStream {
 public:
  explicit DecodeStream(std::string request_id) : request_id_(std::move(request_id)) {}

  const std::string& request_id() const { return request_id_; }

  // Appends a generated token (and its logprobs when the request asked for them).
  void Push(int32_t token, const dqserve::v1::PositionLogprobs* logprobs);
  // Ends the stream; later Push/Finish calls are ignored. `error` only with FINISH_REASON_ERROR
  // (or as the reason of an abort).
  void Finish(dqserve::v1::FinishReason reason, std::string error = "");
  // The request's speculation counters so far; every later response carries them.
  void SetSpecCounts(uint32_t steps, uint32_t drafted, uint32_t accepted);
  // Where the self drafter's prompt KV came from; every later response carries it.
  void SetDrafterPrompt(dqserve::v1::DrafterPrompt source);

  // Waits up to `timeout` for tokens or the end, then moves everything pending into `out`
  // (request id, tokens, logprobs, and finished/finish_reason/error once ended). Returns false
  // when there was nothing to send.
  bool Take(std::chrono::milliseconds timeout, dqserve::v1::DecodeResponse* out);

  bool finished() const;

 private:
  const std::string request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  std::vector<dqserve::v1::PositionLogprobs> logprobs_;
  bool finished_ = false;       // Finish was called
  bool end_delivered_ = false;  // Take handed out the final response
  dqserve::v1::FinishReason reason_ = dqserve::v1::FINISH_REASON_UNSPECIFIED;
  std::string error_;
  uint32_t spec_steps_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
  dqserve::v1::DrafterPrompt drafter_prompt_ = dqserve::v1::DRAFTER_PROMPT_UNSPECIFIED;
};

}  // namespace dq::decode
