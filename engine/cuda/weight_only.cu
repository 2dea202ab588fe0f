// Upload (with the GGUF plane split) and dispatch of the weight-only decode kernels; the
// kernels are in weight_only_kernels.cuh and the per-family gemv_*.cu files.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/weight_only.h"
#include "engine/cuda/weight_only_kernels.cuh"
#include "engine/quant/int_codec.h"

namespace dq::cuda {
namespace {

// What the device has for `w`, or an error naming what it lacks.
absl::Status CheckSupported(const LinearWeight& w) {
  const int64_t in = w.in_features;
  if (w.codec != nullptr) {
    const std::string scheme(w.codec->scheme());
    if (w.mode != ComputeMode::kWeightOnly) {
      return absl::UnimplementedError(absl::StrCat("weight-only kernels: scheme ", scheme, " in ",
                                                   ComputeModeName(w.mode),
                                                   " mode is not weight-only"));
    }
    const bool two_bit = scheme == "int2" || scheme == "lut2";
    const bool known = scheme == "int2" || scheme == "int3" || scheme == "int4" ||
                       scheme == "int8" || scheme == "nvfp4" || scheme == "lut2" ||
                       scheme == "lut3";
    if (!known) {
      return absl::UnimplementedError(
          absl::StrCat("weight-only kernels: no device kernel for scheme ", scheme,
                       "; supported: int2, int3, int4, int8 (group 32/64/128), nvfp4, lut2, lut3"));
    }
    if (in % (two_bit ? 64 : 32) != 0) {
      return absl::UnimplementedError(absl::StrCat("weight-only kernels: ", scheme,
                                                   " needs in_features a multiple of ",
                                                   two_bit ? 64 : 32, ", got ", in));
    }
    return absl::OkStatus();
  }
  switch (w.dtype) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
      return absl::OkStatus();
    case DType::kBF16:
      if (in % 8 == 0) return absl::OkStatus();
      return absl::UnimplementedError("weight-only kernels: bf16 needs in_features % 8 == 0");
    default:
      return absl::UnimplementedError(
          absl::StrCat("weight-only kernels: no device kernel for dtype ", DTypeName(w.dtype),
                       "; supported GGUF types: Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, BF16"));
  }
}

const ComponentView& Part(const LinearWeight& w, const char* name) {
  return w.quantized.parts.at(name);
}

DeviceBuffer Upload(const ComponentView& c) {
  return DeviceBuffer::From(std::span<const uint8_t>(c.data, static_cast<size_t>(c.nbytes)));
}

float ReadF32(const ComponentView& c) {
  float g;
  std::memcpy(&g, c.data, sizeof g);
  return g;
}

// Splits GGUF block rows into the planes gemv_gguf.cu reads (its header describes them).
void SplitGguf(const LinearWeight& w, std::vector<uint8_t>* codes, std::vector<uint8_t>* scales,
               std::vector<uint8_t>* aux) {
  const int64_t out = w.out_features, in = w.in_features;
  const int64_t nb = in / DTypeBlockElems(w.dtype), bb = DTypeBlockBytes(w.dtype);
  // Bytes per block of each plane and where the codes start inside a block.
  int64_t cbytes = 0, sbytes = 0, coff = 0;
  switch (w.dtype) {
    case DType::kQ4_0:
      cbytes = 16, sbytes = 2, coff = 2;
      break;
    case DType::kQ4_1:
      cbytes = 16, sbytes = 4, coff = 4;
      break;
    case DType::kQ8_0:
      cbytes = 32, sbytes = 2, coff = 2;
      break;
    case DType::kQ4_K:
      cbytes = 128, sbytes = 16, coff = 16;
      break;
    default:
      cbytes = 128, sbytes = 18;
      break;  // Q6_K: 8 runs x 16; 16 scales + d
  }
  codes->assign(out * nb * cbytes, 0);
  scales->assign(out * nb * sbytes, 0);
  if (w.dtype == DType::kQ6_K) aux->assign(out * nb * 64, 0);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w.row(r) + b * bb;
      uint8_t* c = codes->data() + (r * nb + b) * cbytes;
      if (w.dtype != DType::kQ6_K) {
        std::memcpy(c, blk + coff, cbytes);
        std::memcpy(scales->data() + (r * nb + b) * sbytes, blk, sbytes);
        continue;
      }
      const uint8_t* ql = blk;
      const uint8_t* qh = blk + 128;
      uint8_t* hi = aux->data() + (r * nb + b) * 64;
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, j = (e / 32) % 4, l = e % 32, run = e / 32;
        const int low = (ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 15;
        const int high = (qh[32 * h + l] >> (2 * j)) & 3;
        c[run * 16 + l % 16] |= static_cast<uint8_t>(low << (4 * (l / 16)));
        hi[run * 8 + l / 4] |= static_cast<uint8_t>(high << (2 * (l % 4)));
      }
      uint8_t* srow = scales->data() + r * nb * 18;
      std::memcpy(srow + b * 16, blk + 192, 16);          // int8 scales of the super-block
      std::memcpy(srow + nb * 16 + b * 2, blk + 208, 2);  // its d, after all scales
    }
  }
}

// The int4 / int2 codes in the tensor-core layout (wo::IntMmaLayoutInfo): each 64-byte block of
// a row (LSB-first stream of 512 / bits codes) rearranged code by code.
template <int kBits>
std::vector<uint8_t> RepackInt(const ComponentView& c, int64_t out, int64_t in) {
  using L = wo::IntMmaLayoutInfo<kBits>;
  const int64_t row_bytes = in * kBits / 8;
  std::vector<uint8_t> dst(out * row_bytes, 0);
  constexpr uint32_t kMask = (1u << kBits) - 1;
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t* src = c.data + r * row_bytes;
    for (int64_t b = 0; b < in / L::kCodes; ++b) {
      uint32_t words[16] = {};
      for (int k = 0; k < L::kCodes; ++k) {
        const int64_t bit = (b * L::kCodes + k) * kBits;
        const uint32_t code = (src[bit / 8] >> (bit % 8)) & kMask;
        words[L::Word(k)] |= code << (kBits * L::Pos(k));
      }
      std::memcpy(dst.data() + r * row_bytes + b * 64, words, 64);
    }
  }
  return dst;
}

// The int4 / int2 codes and (scale, zero) words in the tiled tensor-core layout
// (wo::IntTileCodePos); rows past `out` in the last tile are zero.
void RepackIntTile(const LinearWeight& w, int bits, int group, std::vector<uint8_t>* codes,
                   std::vector<uint32_t>* sz) {
  const int64_t out = w.out_features, in = w.in_features, tiles = (out + 15) / 16;
  const int64_t row_bytes = in * bits / 8, groups = in / group;
  const ComponentView& q = Part(w, "qweight");
  const ComponentView& s = Part(w, "scales");
  const ComponentView& z = Part(w, "zeros");
  codes->assign(tiles * 16 * row_bytes, 0);
  sz->assign(tiles * groups * 16, 0);
  // Where each (row % 16, input % chunk) goes inside its 512-byte chunk: the same for every tile
  // and chunk, so it is computed once (IntTileCodePos of tile 0, chunk 0).
  const int chunk_k = wo::IntTileChunkK(bits);
  const int64_t nchunks = in / chunk_k;
  std::vector<wo::IntTilePos> in_chunk(16 * chunk_k);
  for (int rr = 0; rr < 16; ++rr) {
    for (int kk = 0; kk < chunk_k; ++kk) {
      in_chunk[rr * chunk_k + kk] = wo::IntTileCodePos(bits, chunk_k, rr, kk);
    }
  }
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t* src = q.data + r * row_bytes;
    const wo::IntTilePos* pos = in_chunk.data() + (r % 16) * chunk_k;
    for (int64_t c = 0; c < nchunks; ++c) {
      uint8_t* chunk = codes->data() + ((r / 16) * nchunks + c) * 512;
      for (int kk = 0; kk < chunk_k; ++kk) {
        const int64_t bit = (c * chunk_k + kk) * bits;
        const uint32_t code = (src[bit / 8] >> (bit % 8)) & mask;
        uint32_t word;
        std::memcpy(&word, chunk + pos[kk].word_byte, 4);
        word |= code << pos[kk].bit;
        std::memcpy(chunk + pos[kk].word_byte, &word, 4);
      }
    }
    for (int64_t gi = 0; gi < groups; ++gi) {
      uint16_t scale;
      std::memcpy(&scale, s.data + (r * groups + gi) * 2, 2);
      const uint32_t zero = z.data[r * groups + gi];
      (*sz)[((r / 16 * groups + gi) * 8 + r % 8) * 2 + (r % 16) / 8] = scale | (zero << 16);
    }
  }
}

wo::GemvParams Params(const WeightOnlyWeights& w) {
  wo::GemvParams p;
  p.codes = w.packed.get<uint8_t>();
  p.scales = w.scales.get<uint8_t>();
  p.aux = w.aux.get<uint8_t>();
  p.out = w.out_features;
  p.in = w.in_features;
  p.global = w.global_scale;
  p.codes_row = static_cast<int64_t>(w.packed.bytes()) / w.out_features;
  p.scales_row = static_cast<int64_t>(w.scales.bytes()) / w.out_features;
  p.aux_row = static_cast<int64_t>(w.aux.bytes()) / w.out_features;
  for (int g = w.group_size; g > 1; g >>= 1) ++p.group_shift;
  return p;
}

// Runs the family kernel of `w` (GEMV when dequant_out is null).
void Dispatch(const WeightOnlyWeights& w, const wo::GemvParams& p, int m,
              __nv_bfloat16* dequant_out, cudaStream_t stream) {
  bool ok = false;
  switch (w.format) {
    case WeightOnlyFormat::kInt:
      ok = wo::LaunchIntFamily(w.bits, p, m, dequant_out, stream);
      break;
    case WeightOnlyFormat::kNvfp4:
      ok = wo::LaunchNvfp4LutFamily(0, p, m, dequant_out, stream);
      break;
    case WeightOnlyFormat::kLut:
      ok = wo::LaunchNvfp4LutFamily(w.bits, p, m, dequant_out, stream);
      break;
    case WeightOnlyFormat::kGguf:
      ok = wo::LaunchGgufFamily(static_cast<int>(w.gguf_type), p, m, dequant_out, stream);
      break;
    case WeightOnlyFormat::kNone:
      break;
  }
  if (!ok) {
    std::fprintf(stderr, "weight-only dispatch: no kernel for this WeightOnlyWeights\n");
    std::abort();
  }
}

}  // namespace

bool SupportsWeightOnly(const LinearWeight& w) { return CheckSupported(w).ok(); }

absl::StatusOr<WeightOnlyWeights> UploadWeightOnly(const LinearWeight& w) {
  DQ_RETURN_IF_ERROR(CheckSupported(w));
  WeightOnlyWeights d;
  d.out_features = w.out_features;
  d.in_features = w.in_features;
  if (w.codec != nullptr) {
    const std::string scheme(w.codec->scheme());
    d.bits = scheme.back() - '0';
    if (scheme.rfind("int", 0) == 0) {
      d.format = WeightOnlyFormat::kInt;
      d.group_size = w.quantized.group_size == 0 ? kIntDefaultGroupSize : w.quantized.group_size;
      if (wo::IntTileLayout(d.bits, d.group_size, d.in_features)) {
        std::vector<uint8_t> codes;
        std::vector<uint32_t> sz;
        RepackIntTile(w, d.bits, d.group_size, &codes, &sz);
        d.packed = DeviceBuffer::From(codes);
        d.scales = DeviceBuffer::From(std::span<const uint32_t>(sz));
        return d;
      }
      if (wo::IntMmaLayout(d.bits, d.group_size, d.in_features)) {
        const ComponentView& q = Part(w, "qweight");
        d.packed = DeviceBuffer::From(d.bits == 4 ? RepackInt<4>(q, w.out_features, d.in_features)
                                                  : RepackInt<2>(q, w.out_features, d.in_features));
      } else {
        d.packed = Upload(Part(w, "qweight"));
      }
      d.scales = Upload(Part(w, "scales"));
      d.aux = Upload(Part(w, "zeros"));
    } else {
      d.format = scheme == "nvfp4" ? WeightOnlyFormat::kNvfp4 : WeightOnlyFormat::kLut;
      if (d.format == WeightOnlyFormat::kNvfp4) d.bits = 4;
      d.packed = Upload(Part(w, "weight_packed"));
      d.scales = Upload(Part(w, "weight_scale"));
      d.global_scale = ReadF32(Part(w, "weight_global_scale"));
    }
    return d;
  }
  d.format = WeightOnlyFormat::kGguf;
  d.gguf_type = w.dtype;
  if (w.dtype == DType::kBF16) {
    std::vector<uint8_t> rows(w.out_features * w.in_features * 2);
    for (int64_t r = 0; r < w.out_features; ++r) {
      std::memcpy(rows.data() + r * w.in_features * 2, w.row(r), w.in_features * 2);
    }
    d.packed = DeviceBuffer::From(rows);
    return d;
  }
  std::vector<uint8_t> codes, scales, aux;
  SplitGguf(w, &codes, &scales, &aux);
  d.packed = DeviceBuffer::From(codes);
  d.scales = DeviceBuffer::From(scales);
  if (!aux.empty()) d.aux = DeviceBuffer::From(aux);
  return d;
}

void WeightOnlyGemv(const WeightOnlyWeights& w, const WeightOnlyGemvArgs& args,
                    cudaStream_t stream) {
  if (args.m < 1 || args.m > 8 || (args.y_bf16 == nullptr) == (args.y_accumulate == nullptr)) {
    std::fprintf(stderr, "WeightOnlyGemv: m must be 1..8 with exactly one output (m = %d)\n",
                 args.m);
    std::abort();
  }
  wo::GemvParams p = Params(w);
  p.x = args.x;
  p.y = args.y_bf16;
  p.y_acc = args.y_accumulate;
  p.int_tile = args.int_tile;
  Dispatch(w, p, args.m, nullptr, stream);
}

void DequantizeToBf16(const WeightOnlyWeights& w, __nv_bfloat16* out, cudaStream_t stream) {
  Dispatch(w, Params(w), 1, out, stream);
}

void Bf16Gemv(const __nv_bfloat16* weight, int64_t out_features, int64_t in_features,
              const WeightOnlyGemvArgs& args, cudaStream_t stream) {
  WeightOnlyWeights w;  // a non-owning view: only the kernel parameters are built from it
  wo::GemvParams p;
  p.codes = reinterpret_cast<const uint8_t*>(weight);
  p.codes_row = in_features * 2;
  p.out = out_features;
  p.in = in_features;
  p.x = args.x;
  p.y = args.y_bf16;
  p.y_acc = args.y_accumulate;
  w.format = WeightOnlyFormat::kGguf;
  w.gguf_type = DType::kBF16;
  Dispatch(w, p, args.m, nullptr, stream);
}

}  // namespace dq::cuda
