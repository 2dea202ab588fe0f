#include "tools/dqserve/odp_flags.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "engine/model/odp_policy.h"
#ifdef DQ_HAVE_CUDA
#include "engine/cuda/kernel_options.h"
#include "engine/cuda/odp_backend.h"
#endif

namespace dq::cli {

void AddOdpFlags(CLI::App* cmd, OdpFlags* o) {
  cmd->add_flag("--odp", o->enabled,
                "--device cuda: keep the decode weights resident and stream --prefill-weights "
                "layer by layer for long prompts (offloaded disaggregated prefill)");
  cmd->add_option("--odp-crossover", o->crossover_tokens,
                  "--odp: prompts of this many tokens or more stream (0: measure at start-up)");
  cmd->add_option("--odp-slots", o->slots, "--odp: device slots for streamed layers (>= 2)");
  cmd->add_option("--odp-source", o->source, "--odp: disk (image file, default) or host");
  cmd->add_option("--odp-image-dir", o->image_dir,
                  "--odp: where the streamed image file is written (default: temp folder)");
}

absl::StatusOr<BackendFactory> OdpBackend(const OdpFlags& o, const ModelConfig& prefill,
                                          const ModelConfig& decode,
                                          const Tokenizer& prefill_tokenizer,
                                          const Tokenizer& decode_tokenizer) {
  if (o.source != "disk" && o.source != "host") {
    return absl::InvalidArgumentError(
        absl::StrCat("--odp-source must be disk or host, got '", o.source, "'"));
  }
  DQ_RETURN_IF_ERROR(CheckOdpConfigs(prefill, decode));
  DQ_RETURN_IF_ERROR(CheckOdpTokenizers(prefill_tokenizer, decode_tokenizer));
#ifdef DQ_HAVE_CUDA
  cuda::OdpOptions odp;
  odp.crossover_tokens = o.crossover_tokens;
  odp.stream.slots = o.slots;
  odp.stream.source =
      o.source == "host" ? cuda::WeightSource::kPinnedHost : cuda::WeightSource::kFile;
  const std::filesystem::path dir = o.image_dir.empty() ? std::filesystem::temp_directory_path()
                                                        : std::filesystem::path(o.image_dir);
  odp.stream.image_path = (dir / absl::StrCat("dq-odp-", ::getpid(), ".img")).string();
  cuda::CudaBackendOptions co;
  co.fp8_attention = o.fp8_attention;
  co.batch_invariant = o.batch_invariant;
  absl::StatusOr<cuda::KernelOptions> kernels = cuda::ParseKernelOptions(o.cuda_kernels);
  if (!kernels.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cuda-kernels: ", kernels.status().message()));
  }
  co.kernels = *kernels;
  return cuda::OdpBackendFactory(co, odp);
#else
  return absl::InvalidArgumentError(
      "--odp needs the CUDA backend; build with the release-cuda preset");
#endif
}

}  // namespace dq::cli
