#include "engine/model/weight_binder.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_join.h"
#include "engine/quant/ggml_blocks.h"
#include "engine/quant/gptq_import.h"

namespace dq {

absl::StatusOr<const TensorView*> WeightBinder::Get(const std::string& name) const {
  const TensorView* t = checkpoint_.Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat("checkpoint (", std::string(checkpoint_.format()),
                                            ") has no tensor '", name,
                                            "'; is this the right model for its config?"));
  }
  return t;
}

absl::StatusOr<LinearWeight> WeightBinder::QuantizedMatrix(const std::string& prefix, int64_t out,
                                                           int64_t in) const {
  DQ_ASSIGN_OR_RETURN(const WeightCodec* codec, FindWeightCodec(quant_.scheme));
  LinearWeight w;
  w.codec = codec;
  w.out_features = out;
  w.in_features = in;
  if (quant_.method == "gptq" || quant_.method == "awq") {
    DQ_ASSIGN_OR_RETURN(QuantizedTensors q,
                        ImportGptqLinear(checkpoint_, prefix, 4, quant_.group_size, quant_.sym,
                                         quant_.method == "awq"));
    w.owned_quantized = std::make_shared<QuantizedTensors>(std::move(q));
    w.quantized = w.owned_quantized->view;
  } else {
    w.quantized.scheme = quant_.scheme;
    w.quantized.out_features = out;
    w.quantized.in_features = in;
    w.quantized.group_size = quant_.group_size;
    const std::string lead = prefix + ".";
    for (const TensorView& t : checkpoint_.tensors()) {
      if (t.name.rfind(lead, 0) != 0 || t.name.find('.', lead.size()) != std::string::npos) {
        continue;
      }
      w.quantized.parts[t.name.substr(lead.size())] = {t.dtype, t.shape, t.data, t.nbytes};
    }
  }
  DQ_RETURN_IF_ERROR(codec->Validate(w.quantized, prefix));
  // compressed-tensors convention: input_global_scale = 6 * 448 / calibrated input amax.
  if (const TensorView* s = checkpoint_.Find(prefix + ".input_global_scale"); s != nullptr) {
    if (s->dtype != DType::kF32 || s->numel() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", prefix, ".input_global_scale' must be one f32 value"));
    }
    float g;
    std::memcpy(&g, s->data, 4);
    if (!(g > 0.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", prefix, ".input_global_scale' must be positive, got ", g));
    }
    w.act_global_scale = g;
  }
  return w;
}

absl::StatusOr<LinearWeight> WeightBinder::Matrix(const std::string& name, int64_t out,
                                                  int64_t in) const {
  const std::string suffix = ".weight";
  if (quant_.quantized() && name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string prefix = name.substr(0, name.size() - suffix.size());
    // A module stored as a plain float (or GGUF block) matrix is used as such: embeddings and
    // lm_head usually are, whatever the config's ignore list says.
    const TensorView* plain = checkpoint_.Find(name);
    const bool plain_usable = plain != nullptr && plain->dtype != DType::kF8E4M3 &&
                              plain->dtype != DType::kU8 && plain->dtype != DType::kI8 &&
                              plain->dtype != DType::kI32;
    if (quant_.IsQuantized(prefix) && !plain_usable) return QuantizedMatrix(prefix, out, in);
  }
  DQ_ASSIGN_OR_RETURN(const TensorView* t, Get(name));
  if (t->shape.size() != 2 || t->shape[0] != out || t->shape[1] != in) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                   absl::StrJoin(t->shape, ", "), "], expected [",
                                                   out, ", ", in, "]"));
  }
  // Float matrices and every GGUF block type DotRow knows are used in place.
  const bool usable = t->dtype == DType::kF32 || t->dtype == DType::kF16 ||
                      t->dtype == DType::kBF16 || DTypeBlockElems(t->dtype) > 1;
  if (!usable) {
    return absl::UnimplementedError(absl::StrCat(
        "tensor '", name, "' has type ", DTypeName(t->dtype), ", which linear layers cannot use"));
  }
  LinearWeight w;
  w.dtype = t->dtype;
  w.out_features = out;
  w.in_features = in;
  w.row_bytes = DTypeRowBytes(t->dtype, in);
  w.data = t->data;
  return w;
}

absl::StatusOr<std::vector<float>> WeightBinder::Vector(const std::string& name, int64_t n) const {
  return Values(name, {n});
}

absl::StatusOr<std::vector<float>> WeightBinder::Values(const std::string& name,
                                                        const std::vector<int64_t>& shape) const {
  DQ_ASSIGN_OR_RETURN(const TensorView* t, Get(name));
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                   absl::StrJoin(t->shape, ", "), "], expected [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  if (DTypeBlockElems(t->dtype) != 1 || t->dtype == DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' must be f32/f16/bf16, got ", DTypeName(t->dtype)));
  }
  std::vector<float> v(t->numel());
  DequantizeRow(t->dtype, t->data, v.data(), t->numel());
  return v;
}

}  // namespace dq
