#include "engine/cuda/odp_backend.h"

#include <cstring>

#include "common/logging.h"
#include "engine/model/decoder_model.h"

namespace dq::cuda {
namespace {

bool SameLinear(const LinearWeight& a, const LinearWeight& b) {
  if (a.codec != nullptr || b.codec != nullptr) return false;  // quantized: not compared
  if (a.dtype != b.dtype || a.out_features != b.out_features || a.in_features != b.in_features ||
      a.row_bytes != b.row_bytes) {
    return false;
  }
  for (int64_t r = 0; r < a.out_features; ++r) {
    if (std::memcmp(a.row(r), b.row(r), static_cast<size_t>(a.row_bytes)) != 0) return false;
  }
  return true;
}

absl::StatusOr<int64_t> Calibrate(const ForwardModel& resident, const ForwardModel& streamed,
                                  const KvCacheOptions& kv, const CudaBackendOptions& options,
                                  const OdpCalibrationOptions& calibration) {
  KvCacheOptions ids_only = kv;
  ids_only.host_storage = false;  // block ids only: the KV lives in the device cache
  KvBlockPool pool(ids_only);
  ThreadPool threads(1);
  DQ_ASSIGN_OR_RETURN(
      std::vector<OdpTiming> t,
      MeasureOdpTimings(resident, streamed, pool, threads, options.max_batch_tokens, calibration));
  for (const OdpTiming& x : t) {
    spdlog::info("odp calibration: {} tokens: resident {:.1f} ms, streamed {:.1f} ms", x.tokens,
                 1e3 * x.resident_seconds, 1e3 * x.streamed_seconds);
  }
  return CrossoverFromTimings(t);
}

}  // namespace

bool SameEmbeddings(const DecoderModel& a, const DecoderModel& b) {
  const ModelProgram& x = a.program();
  const ModelProgram& y = b.program();
  return SameLinear(x.embedding, y.embedding) && SameLinear(x.lm_head, y.lm_head);
}

absl::StatusOr<std::shared_ptr<CudaDecoderModel>> CreateStreamedModel(
    const DecoderModel& prefill, const DecoderModel& decode,
    std::shared_ptr<const CudaDecoderModel> resident, std::shared_ptr<DeviceKvCache> kv,
    const CudaBackendOptions& options, const WeightStreamOptions& stream) {
  DQ_RETURN_IF_ERROR(CheckOdpConfigs(prefill.config(), decode.config()));
  CudaWeightPlacement placement;
  placement.stream = &stream;
  if (SameEmbeddings(prefill, decode)) placement.share_embeddings = resident;
  // Prefill and decode passes of one device run one at a time: one set of activations.
  placement.share_workspace = std::move(resident);
  DQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaDecoderModel> m,
                      CudaDecoderModel::Create(prefill, std::move(kv), options, placement));
  return std::shared_ptr<CudaDecoderModel>(std::move(m));
}

BackendFactory OdpBackendFactory(const CudaBackendOptions& options, const OdpOptions& odp) {
  return [options, odp](const DecoderModel& prefill, const DecoderModel& decode,
                        const KvCacheOptions& kv) -> absl::StatusOr<BackendModels> {
    if (&prefill == &decode) {
      return absl::InvalidArgumentError(
          "ODP streams a separate prefill checkpoint; give the prefill phase its own weights");
    }
    DQ_RETURN_IF_ERROR(CheckOdpConfigs(prefill.config(), decode.config()));
    CUDA_CHECK(cudaSetDevice(options.device));
    auto cache = std::make_shared<DeviceKvCache>(kv);
    DQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaDecoderModel> d,
                        CudaDecoderModel::Create(decode, cache, options));
    std::shared_ptr<CudaDecoderModel> resident = std::move(d);
    DQ_ASSIGN_OR_RETURN(std::shared_ptr<CudaDecoderModel> streamed,
                        CreateStreamedModel(prefill, decode, resident, cache, options, odp.stream));
    int64_t crossover = odp.crossover_tokens;
    if (crossover <= 0) {
      DQ_ASSIGN_OR_RETURN(crossover, Calibrate(*resident, *streamed, kv, options, odp.calibration));
    }
    if (crossover == kOdpNeverStream) {
      spdlog::warn(
          "odp: streaming was slower at every calibrated length; prefill stays on the "
          "resident decode weights");
    } else {
      spdlog::info("odp: prompts of {} tokens or more prefill on the streamed checkpoint",
                   crossover);
    }
    BackendModels models;
    models.decode = resident;
    models.prefill = std::make_shared<OdpForwardModel>(resident, streamed, crossover);
    return models;
  };
}

}  // namespace dq::cuda
