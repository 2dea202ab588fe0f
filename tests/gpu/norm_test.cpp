// RmsNormForward (plain and fused with the residual add) against cpu::RmsNorm / AddInPlace.
#include "engine/cuda/norm.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/device_buffer.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;
using gpu_test::MaxRelError;
using gpu_test::RandomFloats;

// bf16 output: the device result is the fp32 value rounded once; bf16 keeps 8 significant bits,
// so that rounding is at most 2^-8 of the value (and of max |ref|), plus fp32 noise.
constexpr double kBf16OutTol = 4.5e-3;

enum class DeltaKind { kNone, kF32, kBf16 };

void CheckNorm(int64_t rows, int n, DeltaKind dk, bool write_residual, bool alias) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << rows << " n " << n << " delta "
                                  << static_cast<int>(dk) << " alias " << alias);
  std::vector<float> x = RandomFloats(rows * n, seed, 3.0f);
  std::vector<float> delta = RandomFloats(rows * n, seed + 1);
  if (dk == DeltaKind::kBf16) delta = gpu_test::RoundBf16(delta);
  std::vector<float> w = RandomFloats(n, seed + 2, 0.5f);
  for (float& v : w) v += 1.0f;
  // CPU reference.
  std::vector<float> r = x;
  if (dk != DeltaKind::kNone) cpu::AddInPlace(r.data(), delta.data(), rows * n);
  std::vector<float> ref(rows * n);
  cpu::RmsNorm(r.data(), w.data(), rows, n, 1e-6f, ref.data());

  DeviceBuffer d_x = DeviceBuffer::From(x), d_w = DeviceBuffer::From(w);
  DeviceBuffer d_df = DeviceBuffer::From(delta);
  DeviceBuffer d_db = DeviceBuffer::From(gpu_test::ToBf16(delta));
  DeviceBuffer d_res(rows * n * sizeof(float)), d_out(rows * n * 2);
  RmsNormArgs a;
  a.residual_in = d_x.get<float>();
  if (dk == DeltaKind::kF32) a.delta_f32 = d_df.get<float>();
  if (dk == DeltaKind::kBf16) a.delta_bf16 = d_db.get<__nv_bfloat16>();
  if (write_residual) a.residual_out = alias ? d_x.get<float>() : d_res.get<float>();
  a.weight = d_w.get<float>();
  a.out = d_out.get<__nv_bfloat16>();
  a.rows = rows;
  a.n = n;
  a.eps = 1e-6f;
  RmsNormForward(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double err = MaxRelError(gpu_test::FromBf16(d_out.ToHost<__nv_bfloat16>()), ref);
  EXPECT_LT(err, kBf16OutTol);
  if (write_residual) {  // fp32 adds are exact IEEE operations on both sides
    const std::vector<float> got = (alias ? d_x : d_res).ToHost<float>();
    EXPECT_EQ(MaxRelError(got, r), 0.0);
  }
  std::printf("rmsnorm rows=%ld n=%d delta=%d residual=%d alias=%d: max rel err %.2e\n",
              static_cast<long>(rows), n, static_cast<int>(dk), write_residual, alias, err);
}

TEST(GpuNorm, PlainMatchesCpu) {
  DQ_REQUIRE_GPU();
  for (int64_t rows : {1, 7, 300}) {
    CheckNorm(rows, 2560, DeltaKind::kNone, false, false);  // Qwen3-4B hidden
    CheckNorm(rows, 576, DeltaKind::kNone, false, false);   // SmolLM2-135M hidden
  }
  CheckNorm(3, 128, DeltaKind::kNone, false, false);
}

TEST(GpuNorm, FusedResidualAddMatchesCpu) {
  DQ_REQUIRE_GPU();
  // 1: a decode step; 8: a graph-sized decode batch; 13: odd; 300: a prefill chunk.
  for (int64_t rows : {1, 8, 13, 300}) {
    CheckNorm(rows, 2560, DeltaKind::kF32, true, false);
    CheckNorm(rows, 2560, DeltaKind::kBf16, true, true);
    CheckNorm(rows, 576, DeltaKind::kF32, true, true);
    CheckNorm(rows, 576, DeltaKind::kBf16, false, false);
  }
}

}  // namespace
}  // namespace dq::cuda
