#include "engine/quant/requantize.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

bool GroupedIntScheme(std::string_view s) { return s.size() == 4 && s.substr(0, 3) == "int"; }

// The largest of the int schemes' group sizes that divides `in`, or 0.
int GroupFor(int64_t in) {
  for (int g : {128, 64, 32}) {
    if (in % g == 0) return g;
  }
  return 0;
}

}  // namespace

absl::StatusOr<LinearWeight> RequantizeLinear(const LinearWeight& w, std::string_view format) {
  DQ_RETURN_IF_ERROR(CheckLmHeadFormat(format));
  if (KeepsStoredLmHead(format)) {
    return absl::InvalidArgumentError("RequantizeLinear: give a scheme, not 'bf16'");
  }
  DQ_ASSIGN_OR_RETURN(const WeightCodec* codec, FindWeightCodec(format));
  QuantizeOptions qo;
  if (GroupedIntScheme(format)) {
    qo.group_size = GroupFor(w.in_features);
    if (qo.group_size == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lm_head ", std::string(format), ": its ", w.in_features,
          " inputs are not a multiple of 32, 64 or 128 (the int groups); keep lm_head bf16"));
    }
  }
  std::vector<float> dense(static_cast<size_t>(w.out_features * w.in_features));
  for (int64_t r = 0; r < w.out_features; ++r) {
    DequantizeLinearRow(w, r, dense.data() + r * w.in_features);
  }
  DQ_ASSIGN_OR_RETURN(QuantizedTensors q,
                      codec->Quantize(dense.data(), w.out_features, w.in_features, qo));
  LinearWeight out;
  out.codec = codec;
  out.owned_quantized = std::make_shared<QuantizedTensors>(std::move(q));
  out.quantized = out.owned_quantized->view;
  out.mode = ComputeMode::kWeightOnly;
  out.out_features = w.out_features;
  out.in_features = w.in_features;
  return out;
}

}  // namespace dq
