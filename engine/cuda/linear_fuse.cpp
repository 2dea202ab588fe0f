#include "engine/cuda/linear_fuse.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace dq::cuda {
namespace {

absl::Status SameStorage(const LinearWeight& a, const LinearWeight& b) {
  if (a.in_features != b.in_features) return absl::FailedPreconditionError("inputs differ");
  if (a.codec != b.codec || a.mode != b.mode || a.act_global_scale != b.act_global_scale) {
    return absl::FailedPreconditionError("schemes or compute modes differ");
  }
  if (a.codec == nullptr && (a.dtype != b.dtype || a.row_bytes != b.row_bytes)) {
    return absl::FailedPreconditionError("dtypes differ");
  }
  if (a.codec != nullptr && a.quantized.group_size != b.quantized.group_size) {
    return absl::FailedPreconditionError("group sizes differ");
  }
  return absl::OkStatus();
}

absl::StatusOr<LinearWeight> ConcatPlain(std::span<const LinearWeight* const> parts,
                                         LinearWeight out) {
  for (const LinearWeight* p : parts) {
    const size_t n = static_cast<size_t>(p->out_features * p->row_bytes);
    const size_t at = out.owned.size();
    out.owned.resize(at + n);
    std::memcpy(out.owned.data() + at, p->data, n);
  }
  out.data = out.owned.data();
  return out;
}

// One component of the fused matrix: per-row components are stacked; per-tensor ones must agree.
absl::Status ConcatComponent(std::span<const LinearWeight* const> parts, const std::string& name,
                             QuantizedTensors& fused) {
  const ComponentView& first = parts[0]->quantized.parts.at(name);
  const bool per_row = !first.shape.empty() && first.shape[0] == parts[0]->out_features;
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape = first.shape;
  if (per_row) shape[0] = 0;
  for (const LinearWeight* p : parts) {
    auto it = p->quantized.parts.find(name);
    if (it == p->quantized.parts.end()) {
      return absl::FailedPreconditionError(absl::StrCat("component ", name, " missing"));
    }
    const ComponentView& c = it->second;
    if (per_row) {
      if (c.shape.empty() || c.shape[0] != p->out_features || c.dtype != first.dtype) {
        return absl::FailedPreconditionError(absl::StrCat("component ", name, " not per-row"));
      }
      bytes.insert(bytes.end(), c.data, c.data + c.nbytes);
      shape[0] += c.shape[0];
    } else if (c.nbytes != first.nbytes || std::memcmp(c.data, first.data, c.nbytes) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("per-tensor component ", name, " differs between the matrices"));
    }
  }
  if (!per_row) bytes.assign(first.data, first.data + first.nbytes);
  fused.Add(name, first.dtype, shape, std::move(bytes));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LinearWeight> ConcatRows(std::span<const LinearWeight* const> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("nothing to concatenate");
  for (const LinearWeight* p : parts) DQ_RETURN_IF_ERROR(SameStorage(*parts[0], *p));
  LinearWeight out;
  out.codec = parts[0]->codec;
  out.mode = parts[0]->mode;
  out.act_global_scale = parts[0]->act_global_scale;
  out.dtype = parts[0]->dtype;
  out.in_features = parts[0]->in_features;
  out.row_bytes = parts[0]->row_bytes;
  for (const LinearWeight* p : parts) out.out_features += p->out_features;
  if (out.codec == nullptr) return ConcatPlain(parts, std::move(out));
  auto fused = std::make_shared<QuantizedTensors>();
  for (const auto& [name, view] : parts[0]->quantized.parts) {
    DQ_RETURN_IF_ERROR(ConcatComponent(parts, name, *fused));
  }
  fused->view.scheme = parts[0]->quantized.scheme;
  fused->view.group_size = parts[0]->quantized.group_size;
  fused->view.out_features = out.out_features;
  fused->view.in_features = out.in_features;
  DQ_RETURN_IF_ERROR(out.codec->Validate(fused->view, "fused matrix"));
  out.quantized = fused->view;
  out.owned_quantized = std::move(fused);
  return out;
}

}  // namespace dq::cuda
