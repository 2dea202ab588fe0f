// Looks up a model's tensors in a checkpoint by name and checks their shapes and types.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/linear_weight.h"
#include "engine/quant/quant_config.h"

namespace dq {

class WeightBinder {
 public:
  WeightBinder(const Checkpoint& checkpoint, const QuantConfig& quant)
      : checkpoint_(checkpoint), quant_(quant) {}

  // A [out, in] matrix used in place (no copy). `name` is the plain weight's name
  // ("<module>.weight"); when the checkpoint quantizes that module, its components
  // ("<module>.weight_packed", ...) are bound instead and validated against [out, in].
  // Errors name the tensor and what is wrong.
  absl::StatusOr<LinearWeight> Matrix(const std::string& name, int64_t out, int64_t in) const;
  // A vector of `n` values, converted to fp32.
  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n) const;
  // A tensor of exactly `shape`, converted to fp32 (row-major).
  absl::StatusOr<std::vector<float>> Values(const std::string& name,
                                            const std::vector<int64_t>& shape) const;
  bool Has(const std::string& name) const { return checkpoint_.Find(name) != nullptr; }

 private:
  absl::StatusOr<const TensorView*> Get(const std::string& name) const;
  absl::StatusOr<LinearWeight> QuantizedMatrix(const std::string& prefix, int64_t out,
                                               int64_t in) const;
  const Checkpoint& checkpoint_;
  const QuantConfig& quant_;
};

}  // namespace dq
