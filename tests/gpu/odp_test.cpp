// Offloaded disaggregated prefill on the GPU: a prefill model whose layers are streamed per pass
// (engine/cuda/weight_stream.h) must give bit-identical logits and KV to the same weights held
// resident, for FP8 (W8A8, with bf16 or FP8 attention) and NVFP4 (W4A4), 2 and 3 slots, from the
// image file (warm and cold page cache) or pinned host memory; a read failing mid-pass fails that
// pass only; and the ODP backend routes short passes to the resident decode weights and long ones
// to the stream.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/cuda_model.h"
#include "engine/cuda/odp_backend.h"
#include "engine/cuda/weight_stream.h"
#include "engine/model/decoder_model.h"
#include "engine/quant/weight_codec.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;
using gpu_test::RandomFloats;
using gpu_test::ToBf16Bits;

ModelConfig TinyQwen3() {
  ModelConfig c;
  c.architecture = "qwen3";
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 5;  // odd and > 3, so 2 and 3 slots both wrap around mid-pass
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  c.max_context = 1024;
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
    const uint16_t b = ToBf16Bits(x[i]);
    std::memcpy(w.owned.data() + 2 * i, &b, 2);
  }
  w.data = w.owned.data();
  return w;
}

LinearWeight Quantized(const std::string& scheme, ComputeMode mode, int group, int64_t out,
                       int64_t in, uint64_t seed) {
  const WeightCodec* codec = *FindWeightCodec(scheme);
  QuantizeOptions qo;
  qo.group_size = group;
  const std::vector<float> x = RandomFloats(out * in, seed, 0.05f);
  auto q = std::make_shared<QuantizedTensors>(*codec->Quantize(x.data(), out, in, qo));
  LinearWeight w;
  w.codec = codec;
  w.quantized = q->view;
  w.owned_quantized = q;
  w.mode = mode;
  w.out_features = out;
  w.in_features = in;
  return w;
}

struct Format {
  std::string scheme;
  ComputeMode mode;
  int group;
  // FP8 prefill attention (CudaBackendOptions::fp8_attention; needs head_dim 128).
  bool fp8_attention = false;
};
void PrintTo(const Format& f, std::ostream* os) {
  *os << f.scheme << (f.fp8_attention ? "+fp8attn" : "");
}

// Random weights in `f`; the embedding and lm_head depend on `seed` only, like two checkpoints
// of one model keeping them in bf16.
DecoderModel MakeModel(const ModelConfig& c, const Format& f, uint64_t seed) {
  ModelProgram w;
  uint64_t s = seed * 1000;
  for (int l = 0; l < c.num_layers; ++l) {
    AttentionBlock a;
    MlpBlock f2;
    a.norm = RandomFloats(c.hidden_size, ++s, 0.2f);
    for (float& x : a.norm) x += 1.0f;
    f2.norm = a.norm;
    a.q_norm.assign(c.head_dim, 1.0f);
    a.k_norm.assign(c.head_dim, 0.9f);
    auto m = [&](int64_t out, int64_t in) {
      return Quantized(f.scheme, f.mode, f.group, out, in, ++s + 77 * f.scheme.size());
    };
    a.q = m(c.q_dim(), c.hidden_size);
    a.k = m(c.kv_dim(), c.hidden_size);
    a.v = m(c.kv_dim(), c.hidden_size);
    a.o = m(c.hidden_size, c.q_dim());
    f2.gate = m(c.intermediate_size, c.hidden_size);
    f2.up = m(c.intermediate_size, c.hidden_size);
    f2.down = m(c.hidden_size, c.intermediate_size);
    w.layers.push_back(AttentionMlpLayer(std::move(a), std::move(f2)));
  }
  w.embedding = Bf16Matrix(c.vocab_size, c.hidden_size, seed + 1);
  w.lm_head = Bf16Matrix(c.vocab_size, c.hidden_size, seed + 2);
  w.final_norm.assign(c.hidden_size, 1.0f);
  w.Finalize();
  return DecoderModel(c, std::move(w));
}

std::string ImagePath() {
  static int n = 0;
  return (std::filesystem::temp_directory_path() /
          ("dq-odp-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".img"))
      .string();
}

struct PrefillResult {
  std::vector<float> logits;
  std::vector<uint16_t> k, v;  // every layer's K and V of the sequence's tokens, in order
};

// Prefills `prompt` in two passes (the second attends to the first's KV) and reads back the
// logits of both passes and the sequence's KV.
absl::StatusOr<PrefillResult> Prefill(const CudaDecoderModel& m, KvBlockPool& pool,
                                      const std::vector<int32_t>& prompt, int split) {
  ThreadPool threads(1);
  KvSequence seq;
  pool.extend(seq, static_cast<int>(prompt.size()));
  PrefillResult r;
  const std::span<const int32_t> all(prompt);
  for (auto part : {all.first(split), all.subspan(split)}) {
    BatchLogits logits;
    absl::Status s =
        m.Forward(Batch{Phase::kPrefill, {{&seq, part, true}}}, pool, threads, &logits, {});
    if (!s.ok()) {
      pool.release(seq);
      return s;
    }
    r.logits.insert(r.logits.end(), logits.values.begin(), logits.values.end());
  }
  const KvCacheOptions& kv = m.kv_cache().options();
  const int64_t per_token = int64_t{kv.num_kv_heads} * kv.head_dim;
  std::vector<uint16_t> tok(per_token);
  for (int l = 0; l < kv.num_layers; ++l) {
    const KvCacheLayer c = m.kv_cache().layer(l);
    for (int t = 0; t < static_cast<int>(prompt.size()); ++t) {
      const int64_t slot =
          int64_t{seq.blocks[t / kv.block_size]} * kv.block_size + t % kv.block_size;
      for (auto [src, dst] : {std::pair{c.k, &r.k}, std::pair{c.v, &r.v}}) {
        EXPECT_EQ(
            cudaMemcpy(tok.data(), src + slot * per_token, per_token * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
        dst->insert(dst->end(), tok.begin(), tok.end());
      }
    }
  }
  pool.release(seq);
  return r;
}

void ExpectBitIdentical(const PrefillResult& want, const PrefillResult& got,
                        const std::string& what) {
  ASSERT_EQ(want.logits.size(), got.logits.size()) << what;
  EXPECT_EQ(std::memcmp(want.logits.data(), got.logits.data(), want.logits.size() * 4), 0)
      << what << ": logits differ";
  EXPECT_EQ(want.k, got.k) << what << ": K differs";
  EXPECT_EQ(want.v, got.v) << what << ": V differs";
}

class OdpStreaming : public ::testing::TestWithParam<Format> {
 protected:
  void SetUp() override {
    c_ = TinyQwen3();
    if (GetParam().fp8_attention) {
      c_.head_dim = 128;
      options_.fp8_attention = true;
    }
    kv_ = KvCacheOptions{c_.num_layers, c_.num_kv_heads, c_.head_dim, 16, 256, false};
    cache_ = std::make_shared<DeviceKvCache>(kv_);
    pool_ = std::make_unique<KvBlockPool>(kv_);
    seed_ = FreshSeed();
    model_ = std::make_unique<DecoderModel>(MakeModel(c_, GetParam(), seed_ % 1000));
    auto r = CudaDecoderModel::Create(*model_, cache_, options_);
    ASSERT_TRUE(r.ok()) << r.status();
    resident_ = std::move(*r);
    ASSERT_EQ(resident_->stats().fp8_attention, GetParam().fp8_attention);
    std::mt19937_64 rng(seed_);
    prompt_.resize(150);
    for (int32_t& t : prompt_) t = static_cast<int32_t>(rng() % c_.vocab_size);
    auto want = Prefill(*resident_, *pool_, prompt_, 97);
    ASSERT_TRUE(want.ok()) << want.status();
    want_ = std::move(*want);
  }

  // With `share`, on the resident model's embedding, lm_head, stream and scratch (as ODP runs).
  std::unique_ptr<CudaDecoderModel> Streamed(const WeightStreamOptions& so, bool share) {
    CudaWeightPlacement p;
    p.stream = &so;
    if (share) {
      // resident_ outlives every streamed model of a test.
      p.share_embeddings =
          std::shared_ptr<const CudaDecoderModel>(resident_.get(), [](const CudaDecoderModel*) {});
      p.share_workspace = p.share_embeddings;
    }
    auto r = CudaDecoderModel::Create(*model_, cache_, options_, p);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  ModelConfig c_;
  KvCacheOptions kv_;
  CudaBackendOptions options_;
  std::shared_ptr<DeviceKvCache> cache_;
  std::unique_ptr<KvBlockPool> pool_;
  uint64_t seed_ = 0;
  std::unique_ptr<DecoderModel> model_;
  std::unique_ptr<CudaDecoderModel> resident_;
  std::vector<int32_t> prompt_;
  PrefillResult want_;
};

TEST_P(OdpStreaming, StreamedPrefillIsBitIdenticalToResident) {
  for (int slots : {2, 3}) {
    for (WeightSource source : {WeightSource::kFile, WeightSource::kPinnedHost}) {
      WeightStreamOptions so;
      so.slots = slots;
      so.source = source;
      so.image_path = ImagePath();
      so.chunk_bytes = 64 << 10;  // several chunks per layer
      auto m = Streamed(so, /*share=*/slots == 2);
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(m->stats().streamed_image_bytes > 0, true);
      for (bool cold : {true, false}) {
        if (source == WeightSource::kPinnedHost && cold) continue;
        if (cold) {
          ASSERT_TRUE(m->weight_streamer()->DropPageCache().ok());
        }
        const std::string what = absl::StrCat(
            GetParam().scheme, " slots=", slots,
            source == WeightSource::kFile ? (cold ? " file cold" : " file warm") : " pinned host",
            " seed=", seed_);
        auto got = Prefill(*m, *pool_, prompt_, 97);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectBitIdentical(want_, *got, what);
      }
    }
  }
}

TEST_P(OdpStreaming, AReadErrorFailsThatPassOnly) {
  WeightStreamOptions so;
  so.slots = 2;
  so.image_path = ImagePath();
  int fail_layer = -1;
  so.fault_for_testing = [&](int layer) {
    if (layer != fail_layer) return absl::OkStatus();
    fail_layer = -1;  // once
    return absl::DataLossError("injected read fault");
  };
  auto m = Streamed(so, true);
  ASSERT_NE(m, nullptr);
  fail_layer = 3;
  auto bad = Prefill(*m, *pool_, prompt_, 97);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  auto good = Prefill(*m, *pool_, prompt_, 97);
  ASSERT_TRUE(good.ok()) << good.status();
  ExpectBitIdentical(want_, *good, "after an injected fault");

  // The image truncated under the server: a clear error naming the file, the resident model
  // unaffected.
  ASSERT_EQ(::truncate(so.image_path.c_str(), 3 * 4096), 0);
  auto cut = Prefill(*m, *pool_, prompt_, 97);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(std::string(cut.status().message()).find("truncated"), std::string::npos)
      << cut.status();
  EXPECT_NE(std::string(cut.status().message()).find(so.image_path), std::string::npos);
  auto again = Prefill(*resident_, *pool_, prompt_, 97);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectBitIdentical(want_, *again, "resident after the streamed failure");
}

INSTANTIATE_TEST_SUITE_P(Formats, OdpStreaming,
                         ::testing::Values(Format{"fp8", ComputeMode::kW8A8, 0},
                                           Format{"fp8", ComputeMode::kW8A8, 0, true},
                                           Format{"nvfp4", ComputeMode::kW4A4, 0}),
                         [](const auto& info) {
                           return info.param.scheme + (info.param.fp8_attention ? "_fp8attn" : "");
                         });

// The ODP backend: an FP8 prefill checkpoint streamed, int4 decode weights resident; short
// passes run resident, long ones streamed, the embedding and lm_head held once.
TEST(OdpBackend, RoutesByCrossoverAndSharesTheEmbeddings) {
  const ModelConfig c = TinyQwen3();
  const uint64_t seed = FreshSeed() % 1000;
  DecoderModel prefill = MakeModel(c, {"fp8", ComputeMode::kW8A8, 0}, seed);
  DecoderModel decode = MakeModel(c, {"int4", ComputeMode::kWeightOnly, 64}, seed);
  KvCacheOptions kv{c.num_layers, c.num_kv_heads, c.head_dim, 16, 256, false};
  OdpOptions odp;
  odp.stream.image_path = ImagePath();
  odp.crossover_tokens = 64;
  auto models = OdpBackendFactory({}, odp)(prefill, decode, kv);
  ASSERT_TRUE(models.ok()) << models.status();
  const auto& router = dynamic_cast<const OdpForwardModel&>(*models->prefill);
  const auto& streamed = dynamic_cast<const CudaDecoderModel&>(router.streamed());
  EXPECT_GT(streamed.stats().shared_weight_bytes, 0);
  EXPECT_EQ(&router.resident(), models->decode.get());
  KvBlockPool pool(kv);
  ThreadPool threads(1);
  for (int n : {10, 63, 64, 200}) {
    KvSequence seq;
    pool.extend(seq, n);
    std::vector<int32_t> ids(n, 7);
    BatchLogits logits;
    const int64_t before = router.streamed_passes();
    ASSERT_TRUE(
        models->prefill
            ->Forward(Batch{Phase::kPrefill, {{&seq, ids, false}}}, pool, threads, &logits, {})
            .ok());
    EXPECT_EQ(router.streamed_passes() - before, n >= 64 ? 1 : 0) << n << " tokens";
    pool.release(seq);
  }
  // A decode checkpoint of another shape is refused before anything is uploaded.
  ModelConfig other = c;
  other.num_kv_heads = 4;
  DecoderModel wrong = MakeModel(other, {"int4", ComputeMode::kWeightOnly, 64}, seed);
  auto bad = OdpBackendFactory({}, odp)(prefill, wrong, kv);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("KV heads"), std::string::npos);
}

// Calibration measures both sides and yields a crossover the router then uses.
TEST(OdpBackend, CalibratesTheCrossoverAtStartUp) {
  const ModelConfig c = TinyQwen3();
  DecoderModel prefill = MakeModel(c, {"fp8", ComputeMode::kW8A8, 0}, 3);
  DecoderModel decode = MakeModel(c, {"int4", ComputeMode::kWeightOnly, 64}, 3);
  KvCacheOptions kv{c.num_layers, c.num_kv_heads, c.head_dim, 16, 256, false};
  OdpOptions odp;
  odp.stream.image_path = ImagePath();
  odp.calibration.lengths = {32, 256, 1024};
  auto models = OdpBackendFactory({}, odp)(prefill, decode, kv);
  ASSERT_TRUE(models.ok()) << models.status();
  const auto& router = dynamic_cast<const OdpForwardModel&>(*models->prefill);
  const int64_t x = router.crossover_tokens();
  EXPECT_TRUE(x == kOdpNeverStream || (x >= 32 && x <= 1024)) << x;
}

}  // namespace
}  // namespace dq::cuda
