// Weight quantization formats ("schemes") behind one interface. Each scheme has exactly one CPU
// reference here that defines its numerics; every other backend is tested against it.
//
// A quantized [out, in] matrix is stored as a few named component tensors, named and laid out as
// compressed-tensors / GPTQ store them where such a convention exists (see each scheme's header),
// so our checkpoints and theirs read through the same code.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace dq {

// One stored component: raw bytes + dtype + shape (row-major). A view into a mapped checkpoint,
// or into QuantizedTensors::storage when freshly quantized.
struct ComponentView {
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
};

// The components of one quantized matrix, by suffix ("weight_packed", "weight_scale", ...).
struct QuantizedView {
  std::string scheme;  // e.g. "fp8", "nvfp4", "int4", "lut3"
  int64_t out_features = 0;
  int64_t in_features = 0;
  int group_size = 0;  // values per scale along `in` (scheme-specific default when 0)
  std::map<std::string, ComponentView> parts;
};

// A freshly quantized matrix that owns its bytes; view() points into `storage`.
struct QuantizedTensors {
  QuantizedView view;
  std::vector<std::vector<uint8_t>> storage;
  // Adds a component that owns `bytes`.
  void Add(const std::string& suffix, DType dtype, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes);
};

struct QuantizeOptions {
  int group_size = 0;  // intN: 32, 64 or 128 (default 128); ignored by fixed-block schemes
  // nvfp4: shared per-tensor amax (q/k/v share one global scale, as do gate/up); <= 0 means
  // use this matrix's own amax.
  float shared_amax = 0.0f;
};

// How activations are treated when a layer computes with quantized weights.
enum class ComputeMode {
  kWeightOnly,  // activations stay in high precision (fp32 on the CPU reference)
  kW8A8,        // fp8 only: activations quantized per token to E4M3 at run time
  kW4A4,        // nvfp4 only: activations quantized to NVFP4 (static global, dynamic blocks)
};
absl::StatusOr<ComputeMode> ParseComputeMode(std::string_view name);
const char* ComputeModeName(ComputeMode m);

class WeightCodec {
 public:
  virtual ~WeightCodec() = default;
  virtual std::string_view scheme() const = 0;
  // Average stored bits per weight for an [out, in] matrix (scales included).
  virtual double BitsPerWeight(int64_t out, int64_t in, int group_size) const = 0;
  // Quantizes a row-major fp32 [out, in] matrix. Errors: `in` not a multiple of the block or
  // group size, bad group size.
  virtual absl::StatusOr<QuantizedTensors> Quantize(const float* w, int64_t out, int64_t in,
                                                    const QuantizeOptions& options) const = 0;
  // Checks that `q` has every component with the right dtype and shape for its [out, in];
  // the error names `tensor_name` and the offending component.
  virtual absl::Status Validate(const QuantizedView& q, const std::string& tensor_name) const = 0;
  // Writes row `r` of the matrix, dequantized exactly, to `dst` (in_features floats).
  // Precondition: Validate(q) is OK.
  virtual void DequantizeRow(const QuantizedView& q, int64_t r, float* dst) const = 0;
  // Whether the scheme defines activation quantization for `mode` (kWeightOnly: always).
  virtual bool Supports(ComputeMode mode) const { return mode == ComputeMode::kWeightOnly; }
  // Replaces `n` activation values in place by their quantize-dequantize image under `mode`
  // (one token's row). `act_global_scale` is the static activation scale where the mode has one
  // (nvfp4 w4a4: the checkpoint's input_global_scale, compressed-tensors' convention
  // 6 * 448 / calibrated amax, used as stored); <= 0 means per-row dynamic. Ignored otherwise.
  virtual void QuantizeActivations(ComputeMode mode, float act_global_scale, float* x,
                                   int64_t n) const {}
};

// The codec for a scheme name ("fp8", "nvfp4", "int2", "int3", "int4", "int8", "lut2",
// "lut3"), or an error listing the known names.
absl::StatusOr<const WeightCodec*> FindWeightCodec(std::string_view scheme);
// All registered scheme names.
std::vector<std::string> WeightCodecNames();

}  // namespace dq
