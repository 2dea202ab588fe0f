// From a validated API request to the pipeline's GenerationInput: tokenize (chat template for
// chat), resolve max_tokens against the context, carry logprob options. Shared by the OpenAI
// HTTP front end and the DqServe gRPC front end; the gRPC request is validated by the same
// parser as the HTTP body (it is turned into the equivalent JSON first), so both APIs accept
// and refuse exactly the same things.
#pragma once

#include "dqserve/v1/generate.pb.h"
#include "router/api_error.h"
#include "router/api_types.h"
#include "router/openai_request.h"
#include "router/request_pipeline.h"
#include "router/served_model.h"

namespace dq::router {

ApiResult<GenerationInput> ChatGeneration(const ChatCompletionRequest& request,
                                          const ServedModel& model,
                                          bool add_generation_prompt = true);
ApiResult<GenerationInput> CompletionGeneration(const CompletionRequest& request,
                                                const ServedModel& model);

// A DqServe GenerateRequest as GenerationInput (request_id and deadline left to the caller).
// Unlike /v1/completions, an unset max_tokens means "up to the context" (the proto's rule).
ApiResult<GenerationInput> GenerationFromProto(const dqserve::v1::GenerateRequest& request,
                                               const ServedModel& model,
                                               const ParseOptions& options);

}  // namespace dq::router
