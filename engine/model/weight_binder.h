// Looks up a model's tensors in a checkpoint by name and checks their shapes and types.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/linear_weight.h"

namespace dq {

class WeightBinder {
 public:
  explicit WeightBinder(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  // A [out, in] matrix used in place (no copy). Errors name the tensor and the expected shape.
  absl::StatusOr<LinearWeight> Matrix(const std::string& name, int64_t out, int64_t in) const;
  // A vector of `n` values, converted to fp32.
  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n) const;
  bool Has(const std::string& name) const { return checkpoint_.Find(name) != nullptr; }

 private:
  absl::StatusOr<const TensorView*> Get(const std::string& name) const;
  const Checkpoint& checkpoint_;
};

}  // namespace dq
