#include "engine/cuda/linear.h"

#include <cuda_fp8.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda/act_quant.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gemm_lt.h"
#include "engine/cuda/linear_kernels.h"
#include "engine/quant/ggml_blocks.h"
#include "engine/quant/nvfp4_scale_layout.h"

namespace dq::cuda {
namespace {

// The fp32 tile an epilogue-scaled GEMM writes before scaling: at most this many floats, so
// large m runs in row chunks.
constexpr int64_t kEpilogueElems = int64_t{16} << 20;

int64_t EpilogueRows(int64_t m, int64_t out) {
  const int64_t rows = std::max<int64_t>(16, kEpilogueElems / std::max<int64_t>(out, 1) / 16 * 16);
  return std::min(m, rows);
}

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "LinearForward: %s\n", msg.c_str());
  std::abort();
}

absl::StatusOr<DeviceLinear> UploadPlain(const LinearWeight& w) {
  DeviceLinear d;
  d.kind = LinearKind::kBf16;
  d.out_features = w.out_features;
  d.in_features = w.in_features;
  const int64_t in = w.in_features;
  std::vector<uint16_t> host(static_cast<size_t>(w.out_features * in));
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t r = 0; r < w.out_features; ++r) {
    uint16_t* dst = host.data() + r * in;
    if (w.dtype == DType::kBF16) {
      std::memcpy(dst, w.row(r), static_cast<size_t>(in) * 2);
      continue;
    }
    DequantizeRow(w.dtype, w.row(r), row.data(), in);
    for (int64_t i = 0; i < in; ++i) dst[i] = F32ToBF16(row[i]);
  }
  d.weight = DeviceBuffer::From(host);
  return d;
}

absl::StatusOr<DeviceLinear> UploadFp8(const LinearWeight& w) {
  const QuantizedView& q = w.quantized;
  DeviceLinear d;
  d.kind = LinearKind::kFp8;
  d.out_features = w.out_features;
  d.in_features = w.in_features;
  const ComponentView& codes = q.parts.at("weight");
  d.weight = DeviceBuffer::From(std::span<const uint8_t>(codes.data, codes.nbytes));
  // Scales as f32 whatever their stored dtype (the codec reads bf16/f16 scales exactly so).
  const ComponentView& sc = q.parts.at("weight_scale");
  std::vector<float> scales(static_cast<size_t>(w.out_features));
  for (int64_t r = 0; r < w.out_features; ++r) {
    uint16_t h;
    switch (sc.dtype) {
      case DType::kBF16:
        std::memcpy(&h, sc.data + 2 * r, 2);
        scales[r] = BF16ToF32(h);
        break;
      case DType::kF16:
        std::memcpy(&h, sc.data + 2 * r, 2);
        scales[r] = F16ToF32(h);
        break;
      default:
        std::memcpy(&scales[r], sc.data + 4 * r, 4);
    }
  }
  d.weight_scale = DeviceBuffer::From(scales);
  return d;
}

absl::StatusOr<DeviceLinear> UploadNvfp4(const LinearWeight& w, Nvfp4Path path) {
  const QuantizedView& q = w.quantized;
  DeviceLinear d;
  d.out_features = w.out_features;
  d.in_features = w.in_features;
  const ComponentView& packed = q.parts.at("weight_packed");
  const ComponentView& scales = q.parts.at("weight_scale");
  d.weight = DeviceBuffer::From(std::span<const uint8_t>(packed.data, packed.nbytes));
  if (path == Nvfp4Path::kNativeFp4) {
    d.kind = LinearKind::kNvfp4W4A4Native;
    d.weight_scale =
        DeviceBuffer::From(ScalesToTiled(scales.data, w.out_features, w.in_features / 16));
  } else {
    d.kind = LinearKind::kNvfp4W4A4;
    d.weight_scale = DeviceBuffer::From(std::span<const uint8_t>(scales.data, scales.nbytes));
  }
  std::memcpy(&d.weight_global_scale, q.parts.at("weight_global_scale").data, 4);
  d.act_global_scale = w.act_global_scale;
  return d;
}

absl::StatusOr<DeviceLinear> UploadWeightOnlyKind(const LinearWeight& w, const std::string& what) {
  if (!SupportsWeightOnly(w)) {
    return absl::UnimplementedError(absl::StrCat(
        "linear layer [", w.out_features, ", ", w.in_features, "] in ", what,
        " has no CUDA implementation; supported: F32/F16/BF16, fp8 (w8a8), nvfp4 (w4a4), and the "
        "weight-only formats of engine/cuda/weight_only.h"));
  }
  DeviceLinear d;
  d.kind = LinearKind::kWeightOnly;
  d.out_features = w.out_features;
  d.in_features = w.in_features;
  DQ_ASSIGN_OR_RETURN(d.weight_only, UploadWeightOnly(w));
  return d;
}

}  // namespace

int64_t DeviceLinear::device_bytes() const {
  return weight.bytes() + weight_scale.bytes() + weight_only.device_bytes();
}

absl::StatusOr<DeviceLinear> UploadLinear(const LinearWeight& w, const KernelOptions& kernels) {
  if (w.codec != nullptr && w.mode == ComputeMode::kW4A4 && w.codec->scheme() == "nvfp4") {
    return UploadLinear(w, Nvfp4PathForCurrentDevice(kernels.nvfp4_gemm));
  }
  return UploadLinear(w, Nvfp4Path::kUnpackBf16);
}

absl::StatusOr<DeviceLinear> UploadLinear(const LinearWeight& w, Nvfp4Path nvfp4_path) {
  if (w.out_features <= 0 || w.in_features <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear layer has shape [", w.out_features, ", ", w.in_features, "]"));
  }
  if (w.codec == nullptr) {
    if (w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16) {
      return UploadPlain(w);
    }
    return UploadWeightOnlyKind(w, std::string(DTypeName(w.dtype)));
  }
  const std::string scheme(w.codec->scheme());
  DQ_RETURN_IF_ERROR(w.codec->Validate(w.quantized, absl::StrCat("linear (", scheme, ")")));
  if (w.mode == ComputeMode::kW8A8 && scheme == "fp8") return UploadFp8(w);
  if (w.mode == ComputeMode::kW4A4 && scheme == "nvfp4") return UploadNvfp4(w, nvfp4_path);
  if (w.mode != ComputeMode::kWeightOnly) {
    return absl::UnimplementedError(absl::StrCat("compute mode ", ComputeModeName(w.mode),
                                                 " is not defined for scheme '", scheme,
                                                 "' (w8a8 needs fp8, w4a4 needs nvfp4)"));
  }
  return UploadWeightOnlyKind(w, absl::StrCat(scheme, " (weight-only)"));
}

// ---------------------------------------------------------------------------------------------

struct LinearContext::Impl {
  GemmLt gemm;
  DeviceBuffer act;        // quantized activations: E4M3 or bf16 [m, in]
  DeviceBuffer row_scale;  // f32 [m]: per-token scale (fp8) or 1 / G_a (nvfp4)
  DeviceBuffer weight;     // bf16 [out, in]: unpacked nvfp4 / dequantized weight-only
  DeviceBuffer acc;        // f32 [rows, out] epilogue tile
  DeviceBuffer act_scale;  // UE4M3 block scales of packed NVFP4 activations, tiled
  DeviceBuffer act_bf16;   // bf16 [m, in]: packed NVFP4 activations unpacked (no FP4 GEMM)
  bool force_epilogue = false;
  bool logged_fp4_fallback = false;
  KernelOptions options;

  template <typename T = void>
  T* Ensure(DeviceBuffer& buf, int64_t bytes, cudaStream_t stream, const char* what) {
    if (buf.bytes() < static_cast<size_t>(bytes)) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
      if (status != cudaStreamCaptureStatusNone) {
        Die(absl::StrCat("the ", what, " scratch (", bytes,
                         " bytes) was not reserved before graph capture; call "
                         "LinearContext::Reserve with the largest layer first"));
      }
      buf = DeviceBuffer(static_cast<size_t>(bytes));  // freeing the old one synchronizes
    }
    return buf.get<T>();
  }
};

LinearContext::LinearContext() : impl_(std::make_unique<Impl>()) {}
LinearContext::~LinearContext() = default;

void LinearContext::Reserve(int64_t max_m, int64_t max_in, int64_t max_out) {
  Impl& c = *impl_;
  const cudaStream_t s = nullptr;
  c.Ensure(c.act, 2 * max_m * max_in, s, "activation");
  c.Ensure(c.row_scale, 4 * max_m, s, "row scale");
  c.Ensure(c.weight, 2 * max_out * max_in, s, "weight");
  c.Ensure(c.acc, 4 * EpilogueRows(max_m, max_out) * max_out, s, "epilogue");
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (ResolveNvfp4Path(major, c.options.nvfp4_gemm) != Nvfp4Path::kNativeFp4) return;
  c.Ensure(c.act_scale, TiledScaleBytes(max_m, (max_in + 15) / 16), s, "activation block scale");
  // The native path's bf16 stand-in runs where FP4 tensor cores are missing (cc < 10).
  if (major < 10) c.Ensure(c.act_bf16, 2 * max_m * max_in, s, "unpacked activation");
}

void LinearContext::SetOptions(const KernelOptions& options) { impl_->options = options; }
const KernelOptions& LinearContext::options() const { return impl_->options; }

void LinearContext::ForceScaleEpilogueForTesting(bool on) { impl_->force_epilogue = on; }

namespace {

GemmArgs BaseGemm(GemmInput input, const void* x, const void* w, const DeviceLinear& d,
                  const LinearArgs& a) {
  GemmArgs g;
  g.input = input;
  g.m = a.m;
  g.n = d.out_features;
  g.k = d.in_features;
  g.x = x;
  g.w = w;
  g.y_bf16 = a.y_bf16;
  g.y_f32 = a.y_accumulate;
  g.accumulate = a.y_accumulate != nullptr;
  return g;
}

// Rows per epilogue chunk of `g`; FP4 activations' tiled block scales restart every 128 rows.
int64_t EpilogueChunk(const GemmArgs& g) {
  const int64_t rows = EpilogueRows(g.m, g.n);
  if (g.input != GemmInput::kE2M1 || rows >= g.m) return rows;
  return std::max(kScaleTileRows, rows / kScaleTileRows * kScaleTileRows);
}

// y (op)= alpha * row_scale[i] * col_scale[j] * (X · Wᵀ)[i, j] through an fp32 tile, in row
// chunks. `g` describes the whole unscaled product (its output fields are replaced).
void GemmWithEpilogue(GemmArgs g, const float* row_scale, const float* col_scale, float alpha,
                      const LinearArgs& a, LinearContext::Impl& c, cudaStream_t stream) {
  const int64_t m = g.m, out = g.n;
  const bool fp4 = g.input == GemmInput::kE2M1;
  const int64_t chunk = EpilogueChunk(g);
  float* acc = c.Ensure<float>(c.acc, 4 * chunk * out, stream, "epilogue");
  const size_t x_row_bytes = fp4 ? static_cast<size_t>(g.k / 2)
                                 : static_cast<size_t>(g.k) * (g.input == GemmInput::kE4M3 ? 1 : 2);
  const auto* x = static_cast<const uint8_t*>(g.x);
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = std::min(chunk, m - r0);
    GemmArgs part = g;
    part.m = rows;
    part.x = x + r0 * x_row_bytes;
    if (fp4) part.x_block_scale = g.x_block_scale + r0 * TiledScaleCols(g.k / 16);
    part.x_scale = part.w_scale = nullptr;
    part.alpha = 1.0f;
    part.y_bf16 = nullptr;
    part.y_f32 = acc;
    part.accumulate = false;
    c.gemm.Run(part, stream);
    ScaleEpilogueArgs e;
    e.acc = acc;
    e.rows = rows;
    e.cols = out;
    e.row_scale = row_scale != nullptr ? row_scale + r0 : nullptr;
    e.col_scale = col_scale;
    e.alpha = alpha;
    if (a.y_bf16 != nullptr) e.y_bf16 = a.y_bf16 + r0 * out;
    if (a.y_accumulate != nullptr) e.y_accumulate = a.y_accumulate + r0 * out;
    ScaleEpilogue(e, stream);
  }
}

void ForwardFp8(const DeviceLinear& w, const LinearArgs& a, LinearContext::Impl& c,
                cudaStream_t stream) {
  auto* q = c.Ensure<__nv_fp8_e4m3>(c.act, a.m * w.in_features, stream, "activation");
  auto* s = c.Ensure<float>(c.row_scale, 4 * a.m, stream, "row scale");
  if (a.swiglu.gate != nullptr) {
    SwiGluQuantizeFp8PerToken(
        {a.swiglu.gate, a.swiglu.up, a.swiglu.stride, a.m, w.in_features, q, s}, stream);
  } else {
    QuantizeFp8PerToken(a.x, a.m, w.in_features, q, s, stream);
  }
  GemmArgs g = BaseGemm(GemmInput::kE4M3, q, w.weight.get(), w, a);
  g.x_scale = s;
  g.w_scale = w.weight_scale.get<float>();
  if (!c.force_epilogue && c.gemm.Supported(g)) return c.gemm.Run(g, stream);
  GemmWithEpilogue(g, s, g.w_scale, 1.0f, a, c, stream);
}

// The NVFP4 product of `g` (operands E2M1 * block scale, whatever their form) times the global
// scales: 1 / (G_a G_w) as alpha when G_a is static, else 1 / G_w and the per-token 1 / G_a in
// the epilogue. The CPU's operands are E2M1 * (s / G); ours are E2M1 * s.
void RunNvfp4Gemm(GemmArgs g, const DeviceLinear& w, const float* inv_g, const LinearArgs& a,
                  LinearContext::Impl& c, cudaStream_t stream) {
  if (w.act_global_scale > 0.0f) {
    g.alpha = static_cast<float>(1.0 / (static_cast<double>(w.act_global_scale) *
                                        static_cast<double>(w.weight_global_scale)));
    return c.gemm.Run(g, stream);
  }
  GemmWithEpilogue(g, inv_g, nullptr, 1.0f / w.weight_global_scale, a, c, stream);
}

void ForwardNvfp4(const DeviceLinear& w, const LinearArgs& a, LinearContext::Impl& c,
                  cudaStream_t stream) {
  const int64_t in = w.in_features, out = w.out_features;
  auto* wb = c.Ensure<__nv_bfloat16>(c.weight, 2 * out * in, stream, "weight");
  auto* xq = c.Ensure<__nv_bfloat16>(c.act, 2 * a.m * in, stream, "activation");
  auto* inv_g = c.Ensure<float>(c.row_scale, 4 * a.m, stream, "row scale");
  UnpackNvfp4ToBf16(w.weight.get<uint8_t>(), w.weight_scale.get<uint8_t>(), out, in, wb, stream);
  QuantDequantNvfp4(a.x, a.m, in, w.act_global_scale, xq, inv_g, stream);
  RunNvfp4Gemm(BaseGemm(GemmInput::kBf16, xq, wb, w, a), w, inv_g, a, c, stream);
}

// Whether cuBLASLt runs the FP4 GEMM `g` as RunNvfp4Gemm will call it (bf16 out or fp32
// accumulate with a static G_a; an unscaled fp32 tile for the dynamic epilogue).
bool Fp4GemmSupported(const GemmArgs& g, const DeviceLinear& w, LinearContext::Impl& c,
                      cudaStream_t stream) {
  if (w.act_global_scale > 0.0f) return c.gemm.Supported(g);
  GemmArgs probe = g;
  probe.m = std::min(g.m, EpilogueChunk(g));
  probe.y_bf16 = nullptr;
  probe.y_f32 = c.Ensure<float>(c.acc, 4 * probe.m * g.n, stream, "epilogue");
  probe.accumulate = false;
  return c.gemm.Supported(probe);
}

void ForwardNvfp4Native(const DeviceLinear& w, const LinearArgs& a, LinearContext::Impl& c,
                        cudaStream_t stream) {
  const int64_t in = w.in_features, out = w.out_features;
  Nvfp4PackedActivations q;
  q.x = a.x;
  q.m = a.m;
  q.n = in;
  q.act_global_scale = w.act_global_scale;
  q.packed = c.Ensure<uint8_t>(c.act, a.m * in / 2, stream, "activation");
  q.tiled_scales =
      c.Ensure<uint8_t>(c.act_scale, TiledScaleBytes(a.m, in / 16), stream, "activation scale");
  q.inv_global = c.Ensure<float>(c.row_scale, 4 * a.m, stream, "row scale");
  QuantizeNvfp4Packed(q, stream);
  GemmArgs g = BaseGemm(GemmInput::kE2M1, q.packed, w.weight.get(), w, a);
  g.x_block_scale = q.tiled_scales;
  g.w_block_scale = w.weight_scale.get<uint8_t>();
  if (Fp4GemmSupported(g, w, c, stream)) return RunNvfp4Gemm(g, w, q.inv_global, a, c, stream);
  if (!c.logged_fp4_fallback) {
    c.logged_fp4_fallback = true;
    spdlog::warn(
        "nvfp4 native path: cuBLASLt has no block-scaled FP4 GEMM for m {} n {} k {} on this "
        "device; the packed operands run unpacked to bf16 instead (same numerics, slower)",
        a.m, out, in);
  }
  auto* wb = c.Ensure<__nv_bfloat16>(c.weight, 2 * out * in, stream, "weight");
  auto* xb = c.Ensure<__nv_bfloat16>(c.act_bf16, 2 * a.m * in, stream, "unpacked activation");
  UnpackNvfp4TiledToBf16(w.weight.get<uint8_t>(), g.w_block_scale, out, in, wb, stream);
  UnpackNvfp4TiledToBf16(q.packed, q.tiled_scales, a.m, in, xb, stream);
  RunNvfp4Gemm(BaseGemm(GemmInput::kBf16, xb, wb, w, a), w, q.inv_global, a, c, stream);
}

// The GEMV kernels, 8 rows of x per launch: every row's sum runs in the same order whatever m is
// (the kernels' per-row work does not depend on the other rows).
template <class Gemv>
void ChunkedGemv(const DeviceLinear& w, const LinearArgs& a, const LinearContext::Impl& c,
                 Gemv gemv) {
  for (int64_t r = 0; r < a.m; r += 8) {
    WeightOnlyGemvArgs g;
    g.int_tile = c.options.int_tile;
    g.x = a.x + r * w.in_features;
    g.m = static_cast<int>(std::min<int64_t>(8, a.m - r));
    g.y_bf16 = a.y_bf16 ? a.y_bf16 + r * w.out_features : nullptr;
    g.y_accumulate = a.y_accumulate ? a.y_accumulate + r * w.out_features : nullptr;
    gemv(g);
  }
}

void ForwardWeightOnly(const DeviceLinear& w, const LinearArgs& a, LinearContext::Impl& c,
                       cudaStream_t stream) {
  if (a.m <= 8 || a.row_invariant) {
    return ChunkedGemv(
        w, a, c, [&](const WeightOnlyGemvArgs& g) { WeightOnlyGemv(w.weight_only, g, stream); });
  }
  auto* wb =
      c.Ensure<__nv_bfloat16>(c.weight, 2 * w.out_features * w.in_features, stream, "weight");
  DequantizeToBf16(w.weight_only, wb, stream);
  c.gemm.Run(BaseGemm(GemmInput::kBf16, a.x, wb, w, a), stream);
}

}  // namespace

void LinearForward(const DeviceLinear& w, const LinearArgs& args, LinearContext& ctx,
                   cudaStream_t stream) {
  const bool swiglu = args.swiglu.gate != nullptr;
  if (args.m < 1 || (args.x == nullptr) == !swiglu ||
      (args.y_bf16 == nullptr) == (args.y_accumulate == nullptr)) {
    Die(absl::StrCat("needs m >= 1 (got ", args.m, "), an input and exactly one output"));
  }
  if (swiglu && !FusesSwiGlu(w)) Die("a SwiGLU input needs an FP8 linear (FusesSwiGlu)");
  LinearContext::Impl& c = ctx.impl();
  switch (w.kind) {
    case LinearKind::kBf16:
      // One row streams the matrix with the weight-only GEMV kernel (measured on the H200 in
      // the whole model: bf16 decode 298 -> 317 tok/s at batch 1); from 4 rows on cuBLASLt is
      // faster (1130 vs 1037 tok/s at batch 4, 2169 vs 1456 at 8), so it keeps those.
      if ((args.m == 1 || args.row_invariant) && w.in_features % 8 == 0) {
        return ChunkedGemv(w, args, c, [&](const WeightOnlyGemvArgs& g) {
          Bf16Gemv(w.weight.get<__nv_bfloat16>(), w.out_features, w.in_features, g, stream);
        });
      }
      return c.gemm.Run(BaseGemm(GemmInput::kBf16, args.x, w.weight.get(), w, args), stream);
    case LinearKind::kFp8:
      return ForwardFp8(w, args, c, stream);
    case LinearKind::kNvfp4W4A4:
      return ForwardNvfp4(w, args, c, stream);
    case LinearKind::kNvfp4W4A4Native:
      return ForwardNvfp4Native(w, args, c, stream);
    case LinearKind::kWeightOnly:
      return ForwardWeightOnly(w, args, c, stream);
  }
}

}  // namespace dq::cuda
