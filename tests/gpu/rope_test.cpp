// QkNormRopeForward (QK-norm + RoPE + paged KV write) against cpu::RmsNorm + cpu::ApplyRope and
// the CPU model's KV copy (engine/model/decoder_model.cpp).
#include "engine/cuda/rope.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/device_buffer.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;
using gpu_test::MaxRelError;

struct RopeCase {
  const char* name;
  int heads, kv_heads, head_dim;
  bool qk_norm;
  RopeStyle style;
  float theta;
  bool fused_qkv;  // q, k, v as views into one [T, (nh + 2 nkv) hd] buffer
};

void CheckRope(const RopeCase& c, int tokens) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " case " << c.name << " T " << tokens);
  const int hd = c.head_dim, qd = c.heads * hd, kd = c.kv_heads * hd, row = qd + 2 * kd;
  const std::vector<float> qkv =
      gpu_test::RoundBf16(gpu_test::RandomFloats(int64_t{tokens} * row, seed, 2.0f));
  std::vector<float> qn = gpu_test::RandomFloats(hd, seed + 1, 0.3f), kn = qn;
  for (int i = 0; i < hd; ++i) qn[i] += 1.0f, kn[i] = 1.0f - kn[i];
  std::mt19937 rng(seed);
  std::vector<int32_t> pos(tokens), slots(tokens);
  const int block_size = 16, num_blocks = (tokens + 15) / 16 + 3;
  std::vector<int32_t> perm(num_blocks * block_size);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < tokens; ++t) {
    pos[t] = t < 3 ? t : static_cast<int32_t>(rng() % 40000);
    slots[t] = perm[t];
  }
  slots[tokens / 2] = -1;  // a padding token: not written
  // CPU reference, per token as DecoderModel::AttentionBlock does it.
  const std::vector<float> inv_freq = cpu::RopeInverseFrequencies(hd, c.theta);
  std::vector<float> q_ref(int64_t{tokens} * qd), k_ref(int64_t{tokens} * kd);
  for (int t = 0; t < tokens; ++t) {
    std::copy_n(&qkv[int64_t{t} * row], qd, &q_ref[int64_t{t} * qd]);
    std::copy_n(&qkv[int64_t{t} * row + qd], kd, &k_ref[int64_t{t} * kd]);
  }
  if (c.qk_norm) {
    cpu::RmsNorm(q_ref.data(), qn.data(), int64_t{tokens} * c.heads, hd, 1e-6f, q_ref.data());
    cpu::RmsNorm(k_ref.data(), kn.data(), int64_t{tokens} * c.kv_heads, hd, 1e-6f, k_ref.data());
  }
  for (int t = 0; t < tokens; ++t) {
    cpu::ApplyRope(&q_ref[int64_t{t} * qd], c.heads, hd, pos[t], inv_freq.data(), c.style);
    cpu::ApplyRope(&k_ref[int64_t{t} * kd], c.kv_heads, hd, pos[t], inv_freq.data(), c.style);
  }
  // Device: fused buffer or three separate ones.
  std::vector<float> q_in(int64_t{tokens} * qd), k_in(int64_t{tokens} * kd), v_in = k_in;
  for (int t = 0; t < tokens; ++t) {
    std::copy_n(&qkv[int64_t{t} * row], qd, &q_in[int64_t{t} * qd]);
    std::copy_n(&qkv[int64_t{t} * row + qd], kd, &k_in[int64_t{t} * kd]);
    std::copy_n(&qkv[int64_t{t} * row + qd + kd], kd, &v_in[int64_t{t} * kd]);
  }
  DeviceBuffer d_qkv = DeviceBuffer::From(gpu_test::ToBf16(qkv));
  DeviceBuffer d_q = DeviceBuffer::From(gpu_test::ToBf16(q_in));
  DeviceBuffer d_k = DeviceBuffer::From(gpu_test::ToBf16(k_in));
  DeviceBuffer d_v = DeviceBuffer::From(gpu_test::ToBf16(v_in));
  DeviceBuffer d_qn = DeviceBuffer::From(qn), d_kn = DeviceBuffer::From(kn);
  DeviceBuffer d_pos = DeviceBuffer::From(pos), d_slots = DeviceBuffer::From(slots);
  DeviceBuffer d_inv = DeviceBuffer::From(inv_freq);
  const int64_t cache_elems = int64_t{num_blocks} * block_size * kd;
  DeviceBuffer d_kc(cache_elems * 2), d_vc(cache_elems * 2);
  CUDA_CHECK(cudaMemset(d_kc.get(), 0, d_kc.bytes()));
  CUDA_CHECK(cudaMemset(d_vc.get(), 0, d_vc.bytes()));
  QkNormRopeArgs a;
  __nv_bfloat16* base = d_qkv.get<__nv_bfloat16>();
  a.q = c.fused_qkv ? base : d_q.get<__nv_bfloat16>();
  a.k = c.fused_qkv ? base + qd : d_k.get<__nv_bfloat16>();
  a.v = c.fused_qkv ? base + qd + kd : d_v.get<__nv_bfloat16>();
  if (c.fused_qkv) a.q_stride = a.k_stride = a.v_stride = row;
  if (c.qk_norm) a.q_norm_weight = d_qn.get<float>(), a.k_norm_weight = d_kn.get<float>();
  a.positions = d_pos.get<int32_t>();
  a.inv_freq = d_inv.get<float>();
  a.slot_mapping = d_slots.get<int32_t>();
  a.tokens = tokens;
  a.num_heads = c.heads;
  a.num_kv_heads = c.kv_heads;
  a.head_dim = hd;
  a.style = c.style;
  KvCacheLayer cache{
      d_kc.get<__nv_bfloat16>(), d_vc.get<__nv_bfloat16>(), num_blocks, block_size, c.kv_heads, hd};
  QkNormRopeForward(a, cache, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> q_got(q_ref.size()), k_got(k_ref.size());
  if (c.fused_qkv) {
    const std::vector<float> all = gpu_test::FromBf16(d_qkv.ToHost<__nv_bfloat16>());
    for (int t = 0; t < tokens; ++t) {
      std::copy_n(&all[int64_t{t} * row], qd, &q_got[int64_t{t} * qd]);
      std::copy_n(&all[int64_t{t} * row + qd], kd, &k_got[int64_t{t} * kd]);
    }
  } else {
    q_got = gpu_test::FromBf16(d_q.ToHost<__nv_bfloat16>());
    k_got = gpu_test::FromBf16(d_k.ToHost<__nv_bfloat16>());
  }
  const double eq = MaxRelError(q_got, q_ref), ek = MaxRelError(k_got, k_ref);
  EXPECT_LT(eq, 4.5e-3);  // one bf16 rounding (2^-8 relative) + fp32 sincos/norm noise
  EXPECT_LT(ek, 4.5e-3);
  // The cache: each written slot holds the token's rotated k and its v; the rest stay zero.
  const std::vector<float> kc = gpu_test::FromBf16(d_kc.ToHost<__nv_bfloat16>());
  const std::vector<float> vc = gpu_test::FromBf16(d_vc.ToHost<__nv_bfloat16>());
  std::vector<float> kc_ref(cache_elems, 0.0f), vc_ref(cache_elems, 0.0f);
  for (int t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    std::copy_n(&k_ref[int64_t{t} * kd], kd, &kc_ref[int64_t{slots[t]} * kd]);
    std::copy_n(&v_in[int64_t{t} * kd], kd, &vc_ref[int64_t{slots[t]} * kd]);
  }
  EXPECT_LT(MaxRelError(kc, kc_ref), 4.5e-3);
  EXPECT_EQ(MaxRelError(vc, vc_ref), 0.0);
  std::printf("rope %s T=%d: max rel err q %.2e k %.2e\n", c.name, tokens, eq, ek);
}

TEST(GpuRope, QkNormRopeAndKvWriteMatchCpu) {
  DQ_REQUIRE_GPU();
  const RopeCase cases[] = {
      {"qwen3-4b neox+qknorm", 32, 8, 128, true, RopeStyle::kNeox, 1000000.0f, false},
      {"qwen3-4b fused qkv", 32, 8, 128, true, RopeStyle::kNeox, 1000000.0f, true},
      {"smollm2 gguf interleaved", 9, 3, 64, false, RopeStyle::kInterleaved, 100000.0f, false},
      {"smollm2 hf neox fused", 9, 3, 64, false, RopeStyle::kNeox, 100000.0f, true},
      {"hd128 interleaved+qknorm", 16, 4, 128, true, RopeStyle::kInterleaved, 10000.0f, true},
  };
  for (const RopeCase& c : cases) {
    CheckRope(c, 1);
    CheckRope(c, 77);
  }
}

}  // namespace
}  // namespace dq::cuda
