#include "engine/quant/weight_codec.h"

#include "absl/strings/str_join.h"

namespace dq {

// Each scheme's file defines its accessor; the registry lists them in one place.
const WeightCodec* Fp8Codec();
const WeightCodec* Nvfp4Codec();
const WeightCodec* IntCodec(int bits);
const WeightCodec* LutCodec(int bits);

void QuantizedTensors::Add(const std::string& suffix, DType dtype, std::vector<int64_t> shape,
                           std::vector<uint8_t> bytes) {
  storage.push_back(std::move(bytes));
  ComponentView c;
  c.dtype = dtype;
  c.shape = std::move(shape);
  c.data = storage.back().data();
  c.nbytes = static_cast<int64_t>(storage.back().size());
  view.parts[suffix] = std::move(c);
}

absl::StatusOr<ComputeMode> ParseComputeMode(std::string_view name) {
  if (name == "weight_only") return ComputeMode::kWeightOnly;
  if (name == "w8a8") return ComputeMode::kW8A8;
  if (name == "w4a4") return ComputeMode::kW4A4;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compute mode '", std::string(name),
                   "'; use weight_only, w8a8 (fp8 weights) or w4a4 (nvfp4 weights)"));
}

const char* ComputeModeName(ComputeMode m) {
  switch (m) {
    case ComputeMode::kWeightOnly:
      return "weight_only";
    case ComputeMode::kW8A8:
      return "w8a8";
    case ComputeMode::kW4A4:
      return "w4a4";
  }
  return "?";
}

namespace {
std::vector<const WeightCodec*> AllCodecs() {
  return {Fp8Codec(),  Nvfp4Codec(), IntCodec(2), IntCodec(3),
          IntCodec(4), IntCodec(8),  LutCodec(2), LutCodec(3)};
}
}  // namespace

std::vector<std::string> WeightCodecNames() {
  std::vector<std::string> names;
  for (const WeightCodec* c : AllCodecs()) names.emplace_back(c->scheme());
  return names;
}

absl::StatusOr<const WeightCodec*> FindWeightCodec(std::string_view scheme) {
  for (const WeightCodec* c : AllCodecs()) {
    if (c->scheme() == scheme) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization format '", std::string(scheme),
                   "'; known: ", absl::StrJoin(WeightCodecNames(), ", ")));
}

}  // namespace dq
