// Imports a GPTQ or AWQ (GEMM) quantized linear layer from a checkpoint into our "intN"
// layout (int_codec.h), losslessly: every imported weight dequantizes to exactly
// float(q - z) * scale with the checkpoint's own f16 scale, as one fp32 product.
// (AutoGPTQ's and AutoAWQ's torch reference paths compute that product in fp16, i.e. round it
// once more to half; ours is the exact product, within half an f16 ulp of theirs.)
//
// GPTQ layout (AutoGPTQ qlinear_cuda_old/qlinear_cuda QuantLinear.pack, GPTQModel, vLLM's
// gptq loader; checked against auto-gptq 0.7.1 and gptqmodel 7.7.0 sources):
//   <prefix>.qweight I32 [in * bits / 32, out]: column o is a little-endian, LSB-first bit
//       stream along the input dim over the rows: word k holds stream bits [32k, 32k + 32), and
//       input i sits at stream bits [i * bits, (i + 1) * bits). For 2/4/8 bits this is "input
//       k * (32 / bits) + j in bits [j * bits, ...) of word k"; for 3 bits, 32 inputs fill three
//       words and inputs 10 and 21 straddle word boundaries (AutoGPTQ's 3-bit pack).
//   <prefix>.qzeros  I32 [n_groups, out * bits / 32]: the same bit stream, along the output
//       dim of each group row. GPTQ "v1" (the only format AutoGPTQ writes, and GPTQModel's
//       default export) stores z - 1: the packer does `zeros -= 1` before packing. We read
//       z = field + 1 per field, as AutoGPTQ's QuantLinear.forward and vLLM's GPTQ kernels do.
//       A field of all ones (2^bits - 1, from a true zero point of 0) therefore reads as
//       z = 2^bits, which our U8 zeros hold; GPTQModel's word-wise "+0x11111111" v1->v2
//       conversion would carry into the next field instead, but vLLM's reading is the one
//       deployed. With sym = true the zero point is fixed at 2^(bits - 1) and qzeros is not
//       read (vLLM's Marlin path for symmetric GPTQ ignores it as well).
//   <prefix>.scales  F16 [n_groups, out]; n_groups = ceil(in / group_size), group_size -1
//       meaning one group over all of `in`.
//   <prefix>.g_idx   I32 [in], optional: the group of each input (act-order / desc_act
//       checkpoints permute it). Our layout keeps groups contiguous along `in`, so the import
//       picks the largest G in {128, 64, 32} dividing `in` such that every aligned run of G
//       inputs maps to one GPTQ group, and copies that group's scale and zero point. Trivial
//       g_idx, group_size -1 and group sizes that are multiples of 32 always convert; a true
//       act-order g_idx (groups interleaved finer than 32 inputs) cannot, and is an error.
// AWQ layout (AutoAWQ WQLinear_GEMM.from_linear, awq/utils/packing_utils.py; autoawq 0.2.9),
// 4 bits only:
//   <prefix>.qweight I32 [in, out / 8]: word c of row i holds outputs c*8 .. c*8 + 7, nibble k
//       (bits 4k .. 4k + 3) holding output c * 8 + kAwqOrder[k], kAwqOrder = {0,2,4,6,1,3,5,7}.
//   <prefix>.qzeros  I32 [in / group, out / 8]: the same nibble order; z stored as is (no -1).
//   <prefix>.scales  F16 [in / group, out].
#pragma once

#include <string>

#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/quant/weight_codec.h"

namespace dq {

inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// Reads `<prefix>.qweight`, `.qzeros`, `.scales` and (GPTQ) `.g_idx` and returns the layer as
// our "int<bits>" scheme. bits: 2, 3, 4 or 8 for GPTQ, 4 for AWQ. group_size: the checkpoint's
// (-1: whole rows). awq: the AWQ GEMM layout instead of GPTQ's; AWQ has no symmetric mode.
// Errors name the offending tensor and say what was expected.
absl::StatusOr<QuantizedTensors> ImportGptqLinear(const Checkpoint& ckpt, const std::string& prefix,
                                                  int bits, int group_size, bool sym, bool awq);

}  // namespace dq
