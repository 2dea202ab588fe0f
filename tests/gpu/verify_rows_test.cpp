// Speculative verification on the GPU: one decode-phase pass over [next token, drafts...] with
// every position's logits must give, row for row, exactly the logits of feeding those tokens one
// decode step at a time (bitwise), so a drafter never changes a greedy answer. The CUDA model runs
// such a pass as one decode row per token (Plan::row_split: the decode attention kernel, the
// row-invariant linears) and replays it from a CUDA graph; both are checked here, at batch 1,
// for draft lengths 1 to 4, on fresh random prompts and drafts.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "engine/cuda/cuda_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_compare.h"

namespace dq {
namespace {

struct VerifyCase {
  std::string model;   // "tiny_qwen3" or "smollm2"
  std::string format;  // empty: as stored; else quantized here to this scheme
  int group_size;
  std::string name;
};

class VerifyRows : public ::testing::TestWithParam<VerifyCase> {};

std::unique_ptr<ModelRunner> MakeRunner(const Model& m, bool batch_invariant = false) {
  ModelRunnerOptions ro;
  ro.kv_capacity = 4096;
  cuda::CudaBackendOptions co;
  co.batch_invariant = batch_invariant;
  ro.backend = cuda::CudaBackendFactory(co);
  auto r = ModelRunner::Create(*m.checkpoint, m.config, ro);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

// The model of `c`, quantized into `dir` when the case asks for a format.
absl::StatusOr<std::unique_ptr<Model>> CaseModel(const VerifyCase& c, const std::string& dir) {
  DQ_ASSIGN_OR_RETURN(auto source, LoadModel(gpu_test::TestModelPath(c.model)));
  if (c.format.empty()) return source;
  return gpu_test::QuantizedCopy(*source, dir, c.format, c.format, c.group_size);
}

TEST_P(VerifyRows, MultiTokenPassEqualsDecodeStepsBitwise) {
  DQ_REQUIRE_GPU();
  const VerifyCase& c = GetParam();
  const std::string path = gpu_test::TestModelPath(c.model);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  gpu_test::ScratchDir dir;
  auto model = CaseModel(c, dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  std::unique_ptr<ModelRunner> runner = MakeRunner(m);
  ASSERT_TRUE(runner);
  const uint64_t seed = gpu_test::FreshSeed();
  std::mt19937_64 rng(seed);
  const int vocab = m.config.vocab_size;
  for (int n = 2; n <= 5; ++n) {  // the next token plus 1..4 drafts
    SCOPED_TRACE(testing::Message() << c.name << " seed " << seed << " rows " << n);
    const std::vector<int32_t> prompt = gpu_test::MixedPrompt(m, seed + n, 7 + 5 * n);
    const int len = static_cast<int>(prompt.size());
    KvSequence seq;
    runner->kv_pool().extend(seq, len + n);
    BatchLogits lp;
    ASSERT_TRUE(runner->Forward(Batch{Phase::kPrefill, {{&seq, prompt, false}}}, &lp).ok());
    std::vector<int32_t> fed = {gpu_test::Argmax(lp.row(0), lp.vocab)};
    for (int j = 1; j < n; ++j) fed.push_back(static_cast<int32_t>(rng() % vocab));
    // One decode step per token (the plain path, graphs on).
    std::vector<float> steps;
    for (int j = 0; j < n; ++j) {
      BatchLogits ls;
      ASSERT_TRUE(
          runner->Forward(Batch{Phase::kDecode, {{&seq, std::span(&fed[j], 1), false}}}, &ls).ok());
      steps.insert(steps.end(), ls.values.begin(), ls.values.end());
    }
    // Back to the prompt, then all n at once with every position's logits, twice (the second
    // pass replays the graph the first captured).
    for (int pass = 0; pass < 2; ++pass) {
      runner->kv_pool().truncate(seq, len);  // gives back the blocks past the prompt
      runner->kv_pool().extend(seq, len + n);
      BatchLogits lv;
      const absl::Status s = runner->Forward(Batch{Phase::kDecode, {{&seq, fed, true}}}, &lv);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(lv.values.size(), steps.size());
      const auto [values, max_abs] =
          gpu_test::BitwiseDiff(lv.values.data(), steps.data(), steps.size());
      EXPECT_EQ(values, 0) << "pass " << pass << ": " << values << " of " << steps.size()
                           << " logits differ from the one-token steps, max |dlogit| " << max_abs;
    }
    runner->kv_pool().release(seq);
  }
  const auto& cuda_model =
      dynamic_cast<const cuda::CudaDecoderModel&>(runner->forward_model(Phase::kDecode));
  EXPECT_EQ(cuda_model.captured_decode_batches(/*row_split=*/true), (std::vector<int>{2, 3, 4, 5}))
      << "the verification passes did not run as decode rows from graphs";
  std::printf(
      "[%s verify] seed %llu: 2..5-token verification passes == one-token steps "
      "bitwise: %s\n",
      c.name.c_str(), static_cast<unsigned long long>(seed), HasFailure() ? "NO" : "yes");
}

// CudaBackendOptions::batch_invariant: a sequence's logits are the same bits whether it decodes
// alone or beside others, in plain steps and in verification rows, with contexts long enough
// (300+ keys) that the decode attention cuts them into partitions.
TEST_P(VerifyRows, BatchInvariantDecodeIgnoresBatchMates) {
  DQ_REQUIRE_GPU();
  const VerifyCase& c = GetParam();
  if (!std::filesystem::exists(gpu_test::TestModelPath(c.model))) GTEST_SKIP();
  gpu_test::ScratchDir dir;
  auto model = CaseModel(c, dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  std::unique_ptr<ModelRunner> alone = MakeRunner(m, true), shared = MakeRunner(m, true);
  ASSERT_TRUE(alone && shared);
  const uint64_t seed = gpu_test::FreshSeed();
  SCOPED_TRACE(testing::Message() << c.name << " seed " << seed);
  // A: the sequence compared; B and C: batch-mates of other lengths.
  const std::vector<int32_t> pa = gpu_test::MixedPrompt(m, seed, 300),
                             pb = gpu_test::MixedPrompt(m, seed + 1, 700),
                             pc = gpu_test::MixedPrompt(m, seed + 2, 20);
  constexpr int kSteps = 4;
  KvSequence a1, a2, b2, c2;
  alone->kv_pool().extend(a1, static_cast<int>(pa.size()) + kSteps + 8);
  shared->kv_pool().extend(a2, static_cast<int>(pa.size()) + kSteps + 8);
  shared->kv_pool().extend(b2, static_cast<int>(pb.size()) + kSteps + 8);
  shared->kv_pool().extend(c2, static_cast<int>(pc.size()) + kSteps + 8);
  BatchLogits l1, l2;
  ASSERT_TRUE(alone->Forward(Batch{Phase::kPrefill, {{&a1, pa, false}}}, &l1).ok());
  const Batch prefill{Phase::kPrefill, {{&a2, pa, false}, {&b2, pb, false}, {&c2, pc, false}}};
  ASSERT_TRUE(shared->Forward(prefill, &l2).ok());
  int32_t next = gpu_test::Argmax(l1.row(0), l1.vocab);
  const int32_t nb = gpu_test::Argmax(l2.row(1), l2.vocab);
  const int32_t nc = gpu_test::Argmax(l2.row(2), l2.vocab);
  std::vector<int32_t> fed;
  for (int step = 0; step < kSteps; ++step) {  // plain decode steps: alone vs beside B and C
    fed.push_back(next);
    const std::span<const int32_t> t(&fed.back(), 1);
    ASSERT_TRUE(alone->Forward(Batch{Phase::kDecode, {{&a1, t, false}}}, &l1).ok());
    const Batch three{
        Phase::kDecode,
        {{&a2, t, false}, {&b2, std::span(&nb, 1), false}, {&c2, std::span(&nc, 1), false}}};
    ASSERT_TRUE(shared->Forward(three, &l2).ok());
    const auto [values, max_abs] = gpu_test::BitwiseDiff(l2.row(0), l1.row(0), l1.vocab);
    EXPECT_EQ(values, 0) << "step " << step << ": " << values << " logits differ, max |dlogit| "
                         << max_abs;
    next = gpu_test::Argmax(l1.row(0), l1.vocab);
  }
  // A verification of A's last 3 tokens beside B's 2-token and C's 1-token items: A's last row
  // is its last decode step's.
  const int back = static_cast<int>(pa.size()) + kSteps - 3;
  shared->kv_pool().truncate(a2, back);
  shared->kv_pool().extend(a2, back + 3);
  shared->kv_pool().truncate(b2, static_cast<int>(pb.size()) + kSteps - 1);
  shared->kv_pool().extend(b2, static_cast<int>(pb.size()) + kSteps + 1);
  const int32_t b_toks[2] = {nb, nb};
  const Batch verify{Phase::kDecode,
                     {{&a2, std::span<const int32_t>(fed).subspan(kSteps - 3), true},
                      {&b2, std::span<const int32_t>(b_toks), true},
                      {&c2, std::span(&nc, 1), false}}};
  BatchLogits lv;
  const absl::Status s = shared->Forward(verify, &lv);
  ASSERT_TRUE(s.ok()) << s;
  const auto [values, max_abs] = gpu_test::BitwiseDiff(lv.row(2), l1.row(0), l1.vocab);
  EXPECT_EQ(values, 0) << "verification row: " << values << " logits differ, max |dlogit| "
                       << max_abs;
  std::printf(
      "[%s batch-invariant] seed %llu: alone == beside two others bitwise (steps and a "
      "verification): %s\n",
      c.name.c_str(), static_cast<unsigned long long>(seed), HasFailure() ? "NO" : "yes");
}

INSTANTIATE_TEST_SUITE_P(Models, VerifyRows,
                         ::testing::Values(VerifyCase{"tiny_qwen3", "", 0, "tiny_qwen3"},
                                           VerifyCase{"tiny_qwen3", "int4", 64, "tiny_qwen3_int4"},
                                           VerifyCase{"tiny_qwen3", "int2", 32, "tiny_qwen3_int2"},
                                           VerifyCase{"smollm2", "", 0, "smollm2_q4_1"},
                                           VerifyCase{"smollm2", "int4", 64, "smollm2_int4"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace dq
