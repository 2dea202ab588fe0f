// Offloaded disaggregated prefill on one GPU (docs/odp.md): the decode checkpoint resident (it
// decodes, and prefills short prompts), the prefill checkpoint streamed layer by layer for long
// ones (weight_stream.h), one KV cache for both. The routing and the crossover are
// engine/model/odp_policy.h; this file builds the CUDA models and measures the crossover.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/cuda/cuda_model.h"
#include "engine/cuda/weight_stream.h"
#include "engine/model/odp_policy.h"

namespace dq::cuda {

struct OdpOptions {
  WeightStreamOptions stream;
  // Passes with at least this many new tokens run on the streamed prefill weights. 0: measured
  // at start-up (MeasureOdpTimings over `calibration`'s lengths).
  int64_t crossover_tokens = 0;
  OdpCalibrationOptions calibration;
};

// Whether `a` and `b` store their embedding and lm_head with the same bytes (as a quantized
// prefill checkpoint and a quantized decode checkpoint of one model do: both keep them in
// bf16), so one device copy can serve both.
bool SameEmbeddings(const DecoderModel& a, const DecoderModel& b);

// The streamed prefill model for `prefill`, writing `kv` (the resident model's cache), running
// on `resident`'s stream and scratch, and using its embedding and lm_head in place when
// SameEmbeddings.
absl::StatusOr<std::shared_ptr<CudaDecoderModel>> CreateStreamedModel(
    const DecoderModel& prefill, const DecoderModel& decode,
    std::shared_ptr<const CudaDecoderModel> resident, std::shared_ptr<DeviceKvCache> kv,
    const CudaBackendOptions& options, const WeightStreamOptions& stream);

// A ModelRunner backend: BackendModels.decode is the resident CudaDecoderModel of the decode
// weights, BackendModels.prefill an OdpForwardModel over it and the streamed model. Errors: the
// two checkpoints differ in KV layout or vocabulary (CheckOdpConfigs), the image cannot be
// written, or a calibration pass fails.
BackendFactory OdpBackendFactory(const CudaBackendOptions& options, const OdpOptions& odp);

}  // namespace dq::cuda
