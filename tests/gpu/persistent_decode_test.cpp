// The persistent decode step (engine/cuda/persistent_decode.h) against the kernel-per-op step
// on the same weights: the tasks restate the reference kernels' arithmetic in their order, so
// the logits must be bitwise equal wherever the reference runs those kernels (int4 / int2 tile
// GEMVs at any batch; bf16 GEMV at batch 1, or at any batch with batch-invariant decode, whose
// attention also uses fixed 256-key partitions). Only bf16 at batch > 1 without batch
// invariance differs by construction (the reference takes cuBLASLt there): that case is held to
// |dlogit| <= 5 % of the largest |logit|. Contexts of 1, ~100 and ~1000 tokens (one to
// several attention partitions), batches 1, 3 and 8 with mixed lengths, graphed and eager steps;
// then whole models (tiny Qwen3, and SmolLM2 quantized to int4 g64) through ModelRunner.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/cuda/cuda_model.h"
#include "engine/model/decoder_model.h"
#include "engine/model/model_runner.h"
#include "engine/quant/weight_codec.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_compare.h"

namespace dq {
namespace {

using gpu_test::FreshSeed;
using gpu_test::RandomFloats;

ModelConfig Shape() {
  ModelConfig c;
  c.architecture = "qwen3";
  c.vocab_size = 3000;
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.num_layers = 3;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  c.max_context = 2048;
  return c;
}

LinearWeight Bf16Matrix(int64_t out, int64_t in, uint64_t seed) {
  LinearWeight w;
  w.dtype = DType::kBF16;
  w.out_features = out;
  w.in_features = in;
  w.row_bytes = in * 2;
  const std::vector<float> x = RandomFloats(out * in, seed, 0.05f);
  w.owned.resize(out * in * 2);
  for (int64_t i = 0; i < out * in; ++i) {
    const uint16_t b = gpu_test::ToBf16Bits(x[i]);
    std::memcpy(w.owned.data() + 2 * i, &b, 2);
  }
  w.data = w.owned.data();
  return w;
}

LinearWeight Matrix(const std::string& format, int64_t out, int64_t in, uint64_t seed) {
  if (format == "bf16") return Bf16Matrix(out, in, seed);
  const WeightCodec* codec = *FindWeightCodec(format);
  QuantizeOptions qo;
  qo.group_size = format == "int2" ? 64 : 128;
  const std::vector<float> x = RandomFloats(out * in, seed, 0.05f);
  auto q = std::make_shared<QuantizedTensors>(*codec->Quantize(x.data(), out, in, qo));
  LinearWeight w;
  w.codec = codec;
  w.quantized = q->view;
  w.owned_quantized = q;
  w.mode = ComputeMode::kWeightOnly;
  w.out_features = out;
  w.in_features = in;
  return w;
}

DecoderModel MakeModel(const ModelConfig& c, const std::string& format, uint64_t seed) {
  ModelProgram w;
  uint64_t s = seed * 1000;
  for (int l = 0; l < c.num_layers; ++l) {
    AttentionBlock a;
    MlpBlock m;
    a.norm = RandomFloats(c.hidden_size, ++s, 0.2f);
    for (float& x : a.norm) x += 1.0f;
    m.norm = RandomFloats(c.hidden_size, ++s, 0.2f);
    for (float& x : m.norm) x += 1.0f;
    a.q_norm = RandomFloats(c.head_dim, ++s, 0.1f);
    for (float& x : a.q_norm) x += 1.0f;
    a.k_norm.assign(c.head_dim, 0.9f);
    a.q = Matrix(format, c.q_dim(), c.hidden_size, ++s);
    a.k = Matrix(format, c.kv_dim(), c.hidden_size, ++s);
    a.v = Matrix(format, c.kv_dim(), c.hidden_size, ++s);
    a.o = Matrix(format, c.hidden_size, c.q_dim(), ++s);
    m.gate = Matrix(format, c.intermediate_size, c.hidden_size, ++s);
    m.up = Matrix(format, c.intermediate_size, c.hidden_size, ++s);
    m.down = Matrix(format, c.hidden_size, c.intermediate_size, ++s);
    w.layers.push_back(AttentionMlpLayer(std::move(a), std::move(m)));
  }
  w.embedding = Bf16Matrix(c.vocab_size, c.hidden_size, seed + 1);
  w.lm_head = Bf16Matrix(c.vocab_size, c.hidden_size, seed + 2);
  w.final_norm = RandomFloats(c.hidden_size, seed + 3, 0.1f);
  for (float& x : w.final_norm) x += 1.0f;
  w.Finalize();
  return DecoderModel(c, std::move(w));
}

struct Case {
  std::string format;
  bool batch_invariant;
  bool graphs;
  int ctas_per_sm = 1;  // KernelOptions::persistent_ctas_per_sm
};
std::string CaseName(const Case& c) {
  return c.format + (c.batch_invariant ? "_invariant" : "") + (c.graphs ? "" : "_eager") +
         (c.ctas_per_sm > 1 ? "_2ctas" : "");
}
void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

struct Side {
  BackendModels m;
  KvBlockPool pool;
  std::vector<KvSequence> seqs;
};

const cuda::CudaDecoderModel& Cuda(const Side& s) {
  return static_cast<const cuda::CudaDecoderModel&>(*s.m.decode);
}

class PersistentDecode : public ::testing::TestWithParam<Case> {};

TEST_P(PersistentDecode, StepEqualsKernelPerOpStep) {
  DQ_REQUIRE_GPU();
  const Case& k = GetParam();
  const ModelConfig c = Shape();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const DecoderModel cpu = MakeModel(c, k.format, seed % 100000);
  KvCacheOptions kv{c.num_layers, c.num_kv_heads, c.head_dim, 16, 0, false};
  kv.num_blocks = 8 * (1100 / 16 + 2) + 16;
  cuda::CudaBackendOptions co;
  co.use_graphs = k.graphs;
  co.batch_invariant = k.batch_invariant;
  cuda::CudaBackendOptions cp = co;
  cp.kernels.persistent_decode = true;
  cp.kernels.persistent_ctas_per_sm = k.ctas_per_sm;
  auto rm = cuda::CudaBackendFactory(co)(cpu, cpu, kv);
  auto pm = cuda::CudaBackendFactory(cp)(cpu, cpu, kv);
  ASSERT_TRUE(rm.ok() && pm.ok()) << rm.status() << pm.status();
  Side ref{std::move(*rm), KvBlockPool(kv), {}}, per{std::move(*pm), KvBlockPool(kv), {}};
  EXPECT_EQ(Cuda(per).stats().fused_qkv_layers, c.num_layers);
  ThreadPool threads(1);
  constexpr int kSteps = 3;
  int64_t bitwise = 0, bounded = 0;
  for (const int batch : {1, 3, 8}) {
    const bool exact = k.format != "bf16" || k.batch_invariant || batch == 1;
    for (const int base : {1, 100, 1000}) {
      SCOPED_TRACE(testing::Message() << "batch " << batch << " context " << base);
      std::vector<std::vector<int32_t>> prompts(batch);
      Batch pre{Phase::kPrefill, {}}, pre2 = pre;
      for (Side* s : {&ref, &per}) s->seqs.assign(batch, KvSequence{});
      for (int i = 0; i < batch; ++i) {
        const int len = base - 1 + (i % 3) * 5 + (base > 1 ? i : 0);
        for (int j = 0; j < len; ++j) {
          prompts[i].push_back(static_cast<int32_t>((seed + 31 * i + 7 * j) % c.vocab_size));
        }
        for (Side* s : {&ref, &per}) s->pool.extend(s->seqs[i], len + kSteps + 1);
        if (len == 0) continue;
        pre.items.push_back({&ref.seqs[i], prompts[i], false});
        pre2.items.push_back({&per.seqs[i], prompts[i], false});
      }
      BatchLogits lr, lp;
      if (!pre.items.empty()) {
        ASSERT_TRUE(ref.m.decode->Forward(pre, ref.pool, threads, &lr, {}).ok());
        ASSERT_TRUE(per.m.decode->Forward(pre2, per.pool, threads, &lp, {}).ok());
      }
      std::vector<int32_t> next(batch);
      for (int i = 0; i < batch; ++i) next[i] = static_cast<int32_t>((seed + i) % c.vocab_size);
      for (int step = 0; step < kSteps; ++step) {
        Batch dr{Phase::kDecode, {}}, dp = dr;
        for (int i = 0; i < batch; ++i) {
          dr.items.push_back({&ref.seqs[i], std::span<const int32_t>(&next[i], 1), false});
          dp.items.push_back({&per.seqs[i], std::span<const int32_t>(&next[i], 1), false});
        }
        ASSERT_TRUE(ref.m.decode->Forward(dr, ref.pool, threads, &lr, {}).ok());
        ASSERT_TRUE(per.m.decode->Forward(dp, per.pool, threads, &lp, {}).ok());
        ASSERT_EQ(lr.values.size(), lp.values.size());
        const int64_t n = static_cast<int64_t>(lr.values.size());
        if (exact) {
          const gpu_test::Mismatch mm =
              gpu_test::BitwiseDiff(lr.values.data(), lp.values.data(), n);
          EXPECT_EQ(mm.values, 0) << "step " << step << ": " << mm.values
                                  << " logits differ, max |dlogit| " << mm.max_abs;
          bitwise += n;
        } else {
          double max_abs = 0, max_diff = 0;
          for (int64_t j = 0; j < n; ++j) {
            max_abs = std::max(max_abs, std::fabs(double(lr.values[j])));
            max_diff = std::max(max_diff, std::fabs(double(lr.values[j]) - lp.values[j]));
          }
          EXPECT_LE(max_diff, 0.05 * max_abs) << "step " << step;
          bounded += n;
        }
        for (int i = 0; i < batch; ++i) {
          next[i] = gpu_test::Argmax(lr.values.data() + int64_t{i} * c.vocab_size, c.vocab_size);
        }
      }
      for (Side* s : {&ref, &per}) {
        for (KvSequence& q : s->seqs) s->pool.release(q);
      }
    }
  }
  EXPECT_TRUE(Cuda(per).SupportsPersistentDecode(8).ok()) << Cuda(per).SupportsPersistentDecode(8);
  EXPECT_EQ(Cuda(per).persistent_decode_batches(), (std::vector<int>{1, 3, 8}))
      << "the persistent path was not taken";
  EXPECT_TRUE(Cuda(ref).persistent_decode_batches().empty());
  std::printf("[persistent %s] seed %llu: %lld logits bitwise equal, %lld within bound\n",
              CaseName(k).c_str(), static_cast<unsigned long long>(seed),
              static_cast<long long>(bitwise), static_cast<long long>(bounded));
}

INSTANTIATE_TEST_SUITE_P(Formats, PersistentDecode,
                         ::testing::Values(Case{"bf16", false, true}, Case{"bf16", true, true},
                                           Case{"int4", false, true}, Case{"int4", false, false},
                                           Case{"int2", false, true}, Case{"bf16", false, true, 2},
                                           Case{"int4", false, true, 2},
                                           Case{"int2", false, false, 2}),
                         [](const auto& info) { return CaseName(info.param); });

// Whole models through ModelRunner: a prompt, then decode steps at batch 1 and 3, persistent
// against kernel per op, bitwise (bf16 decode at batch 3 within the bound above). SmolLM2's GGUF
// (Q4_1) is not covered, so it is quantized to int4 g64 here (head_dim 64, 9 query heads over 3 KV
// heads); tiny Qwen3 runs as stored (bf16) and as int4 g64.
struct ModelCase {
  std::string model, format;
  int group;
};
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.model << " " << c.format; }

std::unique_ptr<ModelRunner> Runner(const Model& m, bool persistent) {
  ModelRunnerOptions ro;
  ro.kv_capacity = 1024;
  cuda::CudaBackendOptions co;
  co.kernels.persistent_decode = persistent;
  ro.backend = cuda::CudaBackendFactory(co);
  const PhaseWeights w{m.checkpoint.get(), &m.config, ComputeMode::kWeightOnly};
  auto r = ModelRunner::Create(w, w, ro);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

class PersistentDecodeModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(PersistentDecodeModel, DecodeEqualsKernelPerOpBitwise) {
  DQ_REQUIRE_GPU();
  const ModelCase& mc = GetParam();
  const std::string path = gpu_test::TestModelPath(mc.model);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto source = LoadModel(path);
  ASSERT_TRUE(source.ok()) << source.status();
  gpu_test::ScratchDir dir;
  std::unique_ptr<Model> quantized;
  if (!mc.format.empty()) {
    auto q = gpu_test::QuantizedCopy(**source, dir.path(), mc.format, mc.format, mc.group);
    ASSERT_TRUE(q.ok()) << q.status();
    quantized = std::move(*q);
  }
  const Model& m = quantized ? *quantized : **source;
  std::unique_ptr<ModelRunner> ref = Runner(m, false), per = Runner(m, true);
  ASSERT_TRUE(ref && per);
  const uint64_t seed = FreshSeed();
  constexpr int kSteps = 5;
  for (const int batch : {1, 3}) {
    SCOPED_TRACE(testing::Message() << mc.model << " seed " << seed << " batch " << batch);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<KvSequence> kr(batch), kp(batch);
    for (int i = 0; i < batch; ++i) {
      prompts.push_back(gpu_test::MixedPrompt(m, seed + batch * 10 + i, 5 + 9 * i));
      const int need = static_cast<int>(prompts[i].size()) + kSteps;
      ref->kv_pool().extend(kr[i], need);
      per->kv_pool().extend(kp[i], need);
    }
    std::vector<int32_t> next(batch);
    for (int step = 0; step <= kSteps; ++step) {
      Batch br{step == 0 ? Phase::kPrefill : Phase::kDecode, {}}, bp = br;
      for (int i = 0; i < batch; ++i) {
        const std::span<const int32_t> t = step == 0 ? std::span<const int32_t>(prompts[i])
                                                     : std::span<const int32_t>(&next[i], 1);
        br.items.push_back({&kr[i], t, false});
        bp.items.push_back({&kp[i], t, false});
      }
      BatchLogits lr, lp;
      ASSERT_TRUE(ref->Forward(br, &lr).ok());
      ASSERT_TRUE(per->Forward(bp, &lp).ok());
      ASSERT_EQ(lr.values.size(), lp.values.size());
      const gpu_test::Mismatch mm = gpu_test::BitwiseDiff(lr.values.data(), lp.values.data(),
                                                          static_cast<int64_t>(lr.values.size()));
      // bf16 at batch > 1: the reference takes cuBLASLt (another summation order), as above.
      if (mc.format.empty() && batch > 1 && step > 0) {
        float peak = 0;
        for (float v : lr.values) peak = std::max(peak, std::fabs(v));
        EXPECT_LE(mm.max_abs, 0.05f * peak) << "step " << step;
      } else {
        EXPECT_EQ(mm.values, 0) << "step " << step << ": max |dlogit| " << mm.max_abs;
      }
      for (int i = 0; i < batch; ++i) next[i] = gpu_test::Argmax(lr.last(i, br), lr.vocab);
    }
    for (int i = 0; i < batch; ++i) {
      ref->kv_pool().release(kr[i]);
      per->kv_pool().release(kp[i]);
    }
  }
  const auto& model =
      dynamic_cast<const cuda::CudaDecoderModel&>(per->forward_model(Phase::kDecode));
  EXPECT_EQ(model.persistent_decode_batches(), (std::vector<int>{1, 3}))
      << model.SupportsPersistentDecode(1);
}

INSTANTIATE_TEST_SUITE_P(Models, PersistentDecodeModel,
                         ::testing::Values(ModelCase{"tiny_qwen3", "", 0},
                                           ModelCase{"tiny_qwen3", "int4", 64},
                                           ModelCase{"smollm2", "int4", 64}),
                         [](const auto& info) {
                           return info.param.model + (info.param.format.empty()
                                                          ? std::string()
                                                          : "_" + info.param.format);
                         });

}  // namespace
}  // namespace dq
