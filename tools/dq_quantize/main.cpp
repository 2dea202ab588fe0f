// dq-quantize: writes a quantized checkpoint (safetensors + config.json + tokenizer files).
//   dq-quantize --model SRC --format nvfp4 --out DIR [--calib text.txt] [--group-size 128]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "engine/model/model_loader.h"
#include "engine/quant/checkpoint_quantizer.h"
#include "engine/quant/weight_codec.h"

namespace {

absl::Status Run(const std::string& model_path, const std::string& out,
                 const std::string& embeddings, dq::QuantizeCheckpointOptions opt) {
  if (embeddings == "bf16") {
    opt.embedding_dtype = dq::DType::kBF16;
  } else if (embeddings == "f32") {
    opt.embedding_dtype = dq::DType::kF32;
  } else if (embeddings == "f16") {
    opt.embedding_dtype = dq::DType::kF16;
  } else {
    return absl::InvalidArgumentError("--embeddings must be bf16, f16 or f32");
  }
  DQ_ASSIGN_OR_RETURN(auto model, dq::LoadModel(model_path));
  DQ_RETURN_IF_ERROR(dq::QuantizeCheckpoint(*model, out, opt));
  std::fprintf(stderr, "dq-quantize: wrote %s (%s)\n", out.c_str(), opt.format.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-quantize: quantize a model's linear layers into a dqserve checkpoint"};
  std::string model, out, embeddings = "bf16";
  dq::QuantizeCheckpointOptions opt;
  app.add_option("--model", model, "source: a .gguf file or a HF checkpoint directory")->required();
  app.add_option("--out", out, "output directory")->required();
  app.add_option("--format", opt.format,
                 "bf16, f32, or a scheme: " + absl::StrJoin(dq::WeightCodecNames(), ", "))
      ->required();
  app.add_option("--group-size", opt.group_size, "intN group size: 32, 64 or 128");
  app.add_option("--calib", opt.calib_file, "text file to calibrate activation scales (w4a4)");
  app.add_option("--calib-tokens", opt.calib_tokens, "calibration tokens at most");
  app.add_option("--embeddings", embeddings, "dtype of embeddings / lm_head: bf16, f16, f32");
  app.add_option("--threads", opt.threads, "CPU threads");
  CLI11_PARSE(app, argc, argv);
  const absl::Status s = Run(model, out, embeddings, opt);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
