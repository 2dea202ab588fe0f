#include "engine/model/weight_binder.h"

#include "absl/strings/str_join.h"
#include "engine/quant/ggml_blocks.h"

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

absl::StatusOr<LinearWeight> WeightBinder::Matrix(const std::string& name, int64_t out,
                                                  int64_t in) const {
  DQ_ASSIGN_OR_RETURN(const TensorView* t, Get(name));
  if (t->shape.size() != 2 || t->shape[0] != out || t->shape[1] != in) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape [",
                                                   absl::StrJoin(t->shape, ", "), "], expected [",
                                                   out, ", ", in, "]"));
  }
  switch (t->dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("tensor '", name, "' has type ",
                                                   DTypeName(t->dtype),
                                                   ", which linear layers cannot use yet"));
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
  DQ_ASSIGN_OR_RETURN(const TensorView* t, Get(name));
  if (t->numel() != n || t->shape.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' has shape [", absl::StrJoin(t->shape, ", "), "], expected [", n, "]"));
  }
  if (DTypeBlockElems(t->dtype) != 1 || t->dtype == DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' must be f32/f16/bf16, got ", DTypeName(t->dtype)));
  }
  std::vector<float> v(n);
  DequantizeRow(t->dtype, t->data, v.data(), n);
  return v;
}

}  // namespace dq
