// Weight rows repacked at load for the q8 decode path's integer dots (issue 25): groups of 16
// rows interleaved so that one vector register holds 4 consecutive weights of each of 16 (or 8)
// rows, and a VNNI dot of it against 4 activation bytes broadcast to every lane leaves each
// row's partial sum in its own lane. A block's scales are one vector too, so a 16-row group
// needs no horizontal sums, and a thread's rows are one contiguous stretch of memory.
//
// Layout, per group of 16 rows, per block of 32 values (the GGUF blocks, in order):
//   Q4_1: 4 vectors of 64 bytes (vector v, row r, byte i = the row's nibble byte 4v + i, whose
//         low nibble is value 4v + i and high nibble value 16 + 4v + i), then 16 f16 d, 16 f16 m.
//   Q8_0: 8 vectors of 64 bytes (vector v, row r, byte i = value 4v + i + 128 as u8), 16 f16 d.
// The same bytes as the GGUF rows (20 / 34 per row per block); rows past out_features are zero.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "engine/cpu/q8_dot.h"

namespace dq {
struct LinearWeight;
}

namespace dq::cpu {

inline constexpr int kQ8PackRows = 16;

struct Q8Packed {
  DType dtype = DType::kQ4_1;  // the GGUF blocks it was packed from (HasQ8Dot)
  int64_t out_features = 0;
  int64_t nblocks = 0;  // blocks of 32 per row
  std::vector<uint8_t> bytes;

  int64_t groups() const { return (out_features + kQ8PackRows - 1) / kQ8PackRows; }
  int64_t block_bytes() const { return (dtype == DType::kQ4_1 ? 20 : 34) * kQ8PackRows; }
  const uint8_t* group(int64_t g) const { return bytes.data() + g * nblocks * block_bytes(); }
};

// `rows` rows of `row_bytes` GGUF blocks of `t` (HasQ8Dot), `in` values each (a multiple of 32).
std::shared_ptr<const Q8Packed> PackQ8(DType t, const uint8_t* rows, int64_t row_bytes, int64_t out,
                                       int64_t in);

// Packs every weight of `w` the q8 path can compute (GGUF Q4_1 / Q8_0, no codec) into
// w.q8_packed; leaves the others alone.
void PackLinearForQ8(LinearWeight& w);

// Which vector kernels run: the best this CPU has (read once from CPUID), or one named (tests run
// each the machine has; a named one it lacks is not run: Q8IsaAvailable says which).
enum class Q8Isa { kBest, kScalar, kAvx2, kAvxVnni, kAvx512Vnni };
bool Q8IsaAvailable(Q8Isa isa);
const char* Q8IsaName(Q8Isa isa);

// out[r] for the rows of groups [first, first + count): row r of the packed matrix times the
// quantized activations x (p.nblocks blocks). `out` has room for count * 16 values (the zero
// rows of a last partial group included). Every ISA gives the same bits as kScalar.
void DotQ8Packed(const Q8Packed& p, int64_t first, int64_t count, const Q8Block* x, float* out,
                 Q8Isa isa = Q8Isa::kBest);

// The per-ISA kernels (q8_packed_avx2.cpp, q8_packed_avx512.cpp): one group, 16 outputs.
void DotQ8GroupAvx2(const Q8Packed& p, const uint8_t* group, const Q8Block* x, float* out);
void DotQ8GroupAvxVnni(const Q8Packed& p, const uint8_t* group, const Q8Block* x, float* out);
void DotQ8GroupAvx512(const Q8Packed& p, const uint8_t* group, const Q8Block* x, float* out);

}  // namespace dq::cpu
