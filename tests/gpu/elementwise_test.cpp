// Embedding gather, SwiGLU (separate and fused gate|up) and the residual add vs the CPU; the
// SwiGLU fused into FP8 activation quantization vs the two kernels it replaces.
#include "engine/cuda/elementwise.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/act_quant.h"
#include "engine/cuda/device_buffer.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;
using gpu_test::MaxRelError;

TEST(GpuElementwise, EmbeddingGatherIsExact) {
  DQ_REQUIRE_GPU();
  for (auto [vocab, hidden] : {std::pair{151936, 2560}, std::pair{49152, 576}, {100, 36}}) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(testing::Message() << "seed " << seed << " hidden " << hidden);
    const std::vector<float> table =
        gpu_test::RoundBf16(gpu_test::RandomFloats(int64_t{vocab} * hidden, seed));
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(37);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % vocab);
    ids[0] = 0, ids[1] = vocab - 1;
    DeviceBuffer d_table = DeviceBuffer::From(gpu_test::ToBf16(table));
    DeviceBuffer d_ids = DeviceBuffer::From(ids);
    DeviceBuffer d_out(ids.size() * hidden * sizeof(float));
    EmbeddingForward({d_table.get<__nv_bfloat16>(), d_ids.get<int32_t>(), d_out.get<float>(),
                      static_cast<int64_t>(ids.size()), hidden},
                     nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> ref;
    for (int32_t id : ids) {
      ref.insert(ref.end(), table.begin() + int64_t{id} * hidden,
                 table.begin() + int64_t{id + 1} * hidden);
    }
    EXPECT_EQ(MaxRelError(d_out.ToHost<float>(), ref), 0.0);
  }
}

void CheckSwiGlu(int64_t rows, int cols, bool fused) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << rows << " cols " << cols
                                  << " fused " << fused);
  const std::vector<float> gu =
      gpu_test::RoundBf16(gpu_test::RandomFloats(rows * 2 * cols, seed, 2.0f));
  // Fused layout: row r = [gate (cols) | up (cols)]; separate: gate rows then up rows.
  std::vector<float> gate(rows * cols), up(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      gate[r * cols + c] = gu[r * 2 * cols + c];
      up[r * cols + c] = gu[r * 2 * cols + cols + c];
    }
  }
  std::vector<float> ref = gate;
  cpu::SiluMulInPlace(ref.data(), up.data(), rows * cols);
  DeviceBuffer d_gu = DeviceBuffer::From(gpu_test::ToBf16(gu));
  DeviceBuffer d_g = DeviceBuffer::From(gpu_test::ToBf16(gate));
  DeviceBuffer d_u = DeviceBuffer::From(gpu_test::ToBf16(up));
  DeviceBuffer d_out(rows * cols * 2);
  SwiGluArgs a;
  if (fused) {
    a.gate = d_gu.get<__nv_bfloat16>();
    a.up = a.gate + cols;
    a.in_stride = 2 * cols;
  } else {
    a.gate = d_g.get<__nv_bfloat16>();
    a.up = d_u.get<__nv_bfloat16>();
  }
  a.out = d_out.get<__nv_bfloat16>();
  a.rows = rows;
  a.cols = cols;
  SwiGluForward(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double err = MaxRelError(gpu_test::FromBf16(d_out.ToHost<__nv_bfloat16>()), ref);
  EXPECT_LT(err, 4.5e-3);  // one bf16 rounding of the output (2^-8 relative) + expf noise
  std::printf("swiglu rows=%ld cols=%d fused=%d: max rel err %.2e\n", static_cast<long>(rows), cols,
              fused, err);
}

TEST(GpuElementwise, SwiGluMatchesCpu) {
  DQ_REQUIRE_GPU();
  CheckSwiGlu(5, 9728, false);  // Qwen3-4B MLP
  CheckSwiGlu(5, 9728, true);
  CheckSwiGlu(33, 1536, true);  // SmolLM2-135M MLP
  CheckSwiGlu(3, 17, false);    // odd width: scalar path
  CheckSwiGlu(3, 17, true);
}

// SwiGluQuantizeFp8PerToken == SwiGluForward then QuantizeFp8PerToken, codes and scales bit
// for bit (the FP8 prefill's down projection takes the fused path, the CPU reference's equal the
// unfused one's).
void CheckSwiGluFp8(int64_t rows, int cols, bool fused_gate_up) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " rows " << rows << " cols " << cols);
  const int64_t stride = fused_gate_up ? 2 * cols : cols;
  const std::vector<float> gu = gpu_test::RandomFloats(rows * 2 * cols, seed, 4.0f);
  DeviceBuffer d_gu = DeviceBuffer::From(gpu_test::ToBf16(gu));
  const auto* gate = d_gu.get<__nv_bfloat16>();
  const auto* up = fused_gate_up ? gate + cols : gate + rows * cols;
  DeviceBuffer d_h(rows * cols * 2), q_ref(rows * cols), q_got(rows * cols);
  DeviceBuffer s_ref(rows * 4), s_got(rows * 4);
  SwiGluForward({gate, up, stride, d_h.get<__nv_bfloat16>(), rows, cols}, nullptr);
  QuantizeFp8PerToken(d_h.get<__nv_bfloat16>(), rows, cols, q_ref.get<__nv_fp8_e4m3>(),
                      s_ref.get<float>(), nullptr);
  SwiGluQuantizeFp8PerToken(
      {gate, up, stride, rows, cols, q_got.get<__nv_fp8_e4m3>(), s_got.get<float>()}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(q_got.ToHost<uint8_t>(), q_ref.ToHost<uint8_t>());
  EXPECT_EQ(s_got.ToHost<float>(), s_ref.ToHost<float>());
}

TEST(GpuElementwise, SwiGluFusedIntoFp8QuantizationIsBitIdentical) {
  DQ_REQUIRE_GPU();
  CheckSwiGluFp8(37, 9728, true);  // Qwen3-4B MLP, gate|up fused
  CheckSwiGluFp8(37, 9728, false);
  CheckSwiGluFp8(5, 1536, true);  // SmolLM2-135M MLP
  CheckSwiGluFp8(1, 8, false);
}

TEST(GpuElementwise, ResidualAddMatchesCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t n = 7 * 2560 + 3;
  const std::vector<float> x = gpu_test::RandomFloats(n, seed);
  const std::vector<float> d = gpu_test::RoundBf16(gpu_test::RandomFloats(n, seed + 1));
  std::vector<float> ref = x;
  cpu::AddInPlace(ref.data(), d.data(), n);
  for (bool bf16 : {false, true}) {
    DeviceBuffer d_x = DeviceBuffer::From(x), d_f = DeviceBuffer::From(d);
    DeviceBuffer d_b = DeviceBuffer::From(gpu_test::ToBf16(d));
    ResidualAddArgs a;
    a.residual = d_x.get<float>();
    a.delta_f32 = bf16 ? nullptr : d_f.get<float>();
    a.delta_bf16 = bf16 ? d_b.get<__nv_bfloat16>() : nullptr;
    a.n = n;
    ResidualAddForward(a, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(MaxRelError(d_x.ToHost<float>(), ref), 0.0) << "bf16 delta " << bf16;
  }
}

}  // namespace
}  // namespace dq::cuda
