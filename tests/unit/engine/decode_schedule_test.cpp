// The persistent decode step's schedule (engine/model/decode_schedule.h) and its CPU executor
// (engine/cpu/decode_schedule_executor.h): the plan covers a step exactly once in a deadlock-free
// order, and executing it with several workers equals DecoderModel's pass over the same tokens:
// decode steps of 1 and 2 sequences bit for bit (bf16 and int4 weights, several worker counts),
// of 4 to fp32 rounding, and verification passes (several rows of one sequence, causal among
// them) bit for bit on bf16 weights.
#include "engine/model/decode_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "engine/cpu/decode_schedule_executor.h"
#include "engine/model/decoder_model.h"
#include "engine/model/model_runner.h"
#include "engine/quant/checkpoint_quantizer.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

TEST(DecodeSchedule, CoversAStepOnceInAnOrderWorkersCannotDeadlockOn) {
  std::unique_ptr<Model> m = testing::LoadTinyQwen3();
  ASSERT_NE(m, nullptr);
  auto runner = ModelRunner::Create(*m->checkpoint, m->config, {});
  ASSERT_TRUE(runner.ok()) << runner.status();
  const ModelProgram& p =
      dynamic_cast<const DecoderModel&>((*runner)->forward_model(Phase::kDecode)).program();
  for (int workers : {1, 3, 132}) {
    for (int batch : {1, 8, 40}) {
      SCOPED_TRACE(::testing::Message() << workers << " workers, " << batch << " rows");
      auto s = PlanDecodeStep(p, m->config, {workers, 2, 16, batch});
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_TRUE(CheckDecodeSchedule(*s, p, m->config).ok())
          << CheckDecodeSchedule(*s, p, m->config);
      // Per layer: q|k|v, RoPE + KV, attention, o, gate|up, down; then the lm_head.
      EXPECT_EQ(s->num_counters(), 6 * m->config.num_layers + 1);
      EXPECT_EQ(s->stage_tasks[1], batch * m->config.num_kv_heads);  // one per (token, KV head)
      // The RoPE + KV stage folded into attention: one stage fewer per layer.
      auto fused = PlanDecodeStep(p, m->config, {workers, 2, 16, batch, true});
      ASSERT_TRUE(fused.ok()) << fused.status();
      EXPECT_TRUE(CheckDecodeSchedule(*fused, p, m->config).ok())
          << CheckDecodeSchedule(*fused, p, m->config);
      EXPECT_EQ(fused->num_counters(), 5 * m->config.num_layers + 1);
      EXPECT_EQ(fused->tasks[fused->stage_tasks[0]].kind, DecodeTaskKind::kAttention);
      for (const DecodeTask& t : fused->tasks) EXPECT_NE(t.kind, DecodeTaskKind::kRopeKv);
      for (const DecodeTask& t : s->tasks) {
        if (t.kind == DecodeTaskKind::kQkv && t.end < m->config.q_dim()) {
          EXPECT_EQ((t.end - t.begin) % 16, 0) << "GEMV tiles are multiples of 16 rows";
        }
      }
    }
  }
  // A broken plan is named: a queue out of the global order, a stage with a hole.
  auto s = PlanDecodeStep(p, m->config, {2, 1, 16, 1});
  ASSERT_TRUE(s.ok());
  DecodeSchedule swapped = *s;
  std::swap(swapped.queues[0][0], swapped.queues[0][1]);
  EXPECT_NE(CheckDecodeSchedule(swapped, p, m->config).message().find("global order"),
            std::string::npos);
  DecodeSchedule holed = *s;
  holed.tasks[0].end -= 1;
  EXPECT_NE(CheckDecodeSchedule(holed, p, m->config).message().find("covers"), std::string::npos);
  EXPECT_FALSE(PlanDecodeStep(p, m->config, {0, 1, 16, 1}).ok());
  EXPECT_FALSE(PlanDecodeStep(p, m->config, {4, 1, 16, 65}).ok());
}

class DecodeScheduleExecutorTest : public ::testing::Test {
 protected:
  static std::string ScratchDir(const std::string& prefix) {
    return (std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid())))
        .string();
  }
  // `m` quantized to int4 (group 32) under `dir` and loaded: the codec path of LinearRowDot.
  static absl::StatusOr<std::unique_ptr<Model>> Int4Copy(const Model& m, const std::string& dir) {
    QuantizeCheckpointOptions qo;
    qo.format = "int4";
    qo.group_size = 32;
    qo.progress = false;
    DQ_RETURN_IF_ERROR(QuantizeCheckpoint(m, dir, qo));
    return LoadModel(dir);
  }

  // Prefills one random prompt per entry of `rows` in `runner`, then runs one pass of rows[i] new
  // tokens for sequence i both ways (DecoderModel with every row's logits; the schedule) and
  // returns the largest |Δlogit| (0 when bitwise equal).
  double StepBothWays(ModelRunner& runner, std::vector<int> rows, int workers, uint64_t seed,
                      bool rope_in_attention = false) {
    const DecoderModel& model =
        dynamic_cast<const DecoderModel&>(runner.forward_model(Phase::kDecode));
    const ModelConfig& c = model.config();
    const int n = static_cast<int>(rows.size());
    std::mt19937 rng(seed);
    std::vector<KvSequence> a(n), b(n);
    std::vector<std::vector<int32_t>> next(n);
    int total = 0;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> prompt(5 + 7 * i);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
      for (int j = 0; j < rows[i]; ++j)
        next[i].push_back(static_cast<int32_t>(rng() % c.vocab_size));
      total += rows[i];
      for (KvSequence* s : {&a[i], &b[i]}) {
        runner.kv_pool().extend(*s, static_cast<int>(prompt.size()) + rows[i]);
        BatchLogits l;
        EXPECT_TRUE(runner.Forward(Batch{Phase::kPrefill, {{s, prompt, false}}}, &l).ok());
      }
    }
    Batch step{Phase::kDecode, {}};
    std::vector<cpu::DecodeStepItem> items;
    for (int i = 0; i < n; ++i) {
      step.items.push_back({&a[i], next[i], true});
      items.push_back({&b[i], next[i]});
    }
    BatchLogits want;
    EXPECT_TRUE(runner.Forward(step, &want).ok());
    auto plan = PlanDecodeStep(model.program(), c, {workers, 2, 16, total, rope_in_attention});
    EXPECT_TRUE(plan.ok()) << plan.status();
    std::vector<float> got;
    EXPECT_TRUE(
        cpu::RunDecodeSchedule(*plan, model.program(), c, items, runner.kv_pool(), &got).ok());
    EXPECT_EQ(got.size(), want.values.size());
    double worst = got.size() == want.values.size() ? 0.0 : 1e30;
    for (size_t i = 0; i < got.size() && i < want.values.size(); ++i) {
      worst = std::max(worst, double(std::fabs(got[i] - want.values[i])));
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(b[i].num_tokens, a[i].num_tokens);
      runner.kv_pool().release(a[i]);
      runner.kv_pool().release(b[i]);
    }
    return worst;
  }
};

TEST_F(DecodeScheduleExecutorTest, EqualsTheDecodeStepBitForBit) {
  std::unique_ptr<Model> m = testing::LoadTinyQwen3();
  ASSERT_NE(m, nullptr);
  // int4 weights too: the codec path of LinearRowDot.
  const std::string dir = ScratchDir("dq-sched-");
  auto q = Int4Copy(*m, dir);
  ASSERT_TRUE(q.ok()) << q.status();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const Model* model : {m.get(), q->get()}) {
    ModelRunnerOptions ro;
    ro.threads = 2;
    ro.kv_capacity = 256;
    auto runner = ModelRunner::Create(*model->checkpoint, model->config, ro);
    ASSERT_TRUE(runner.ok()) << runner.status();
    for (int batch : {1, 2}) {
      for (int workers : {1, 3, 7}) {
        SCOPED_TRACE(::testing::Message()
                     << model->path << " batch " << batch << ", " << workers << " workers");
        EXPECT_EQ(StepBothWays(**runner, std::vector<int>(batch, 1), workers, seed + batch), 0.0);
        EXPECT_EQ(StepBothWays(**runner, std::vector<int>(batch, 1), workers, seed + batch, true),
                  0.0)
            << "RoPE in attention";
      }
    }
    // Batch 4 and verification passes: the reference's multi-row dot of quantized weights sums
    // in another order; plain weights stay bitwise.
    const bool plain = model == m.get();
    for (const std::vector<int>& rows :
         {std::vector<int>{1, 1, 1, 1}, std::vector<int>{5}, std::vector<int>{3, 2}}) {
      const double d = StepBothWays(**runner, rows, 5, seed + rows.size());
      if (plain) {
        EXPECT_EQ(d, 0.0) << rows.size() << " sequences";
      } else {
        EXPECT_LT(d, 1e-4) << rows.size() << " sequences";
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// Batch invariance comes with the schedule: each row's tasks compute it alone (per-row dots,
// per-row attention), so a sequence's logits are the same bits whether it decodes alone or
// beside three others, on int4 weights too (where DecoderModel's multi-row dot differs).
TEST_F(DecodeScheduleExecutorTest, ARowsLogitsDoNotDependOnItsBatchMates) {
  std::unique_ptr<Model> m = testing::LoadTinyQwen3();
  ASSERT_NE(m, nullptr);
  const std::string dir = ScratchDir("dq-sched-inv-");
  auto q = Int4Copy(*m, dir);
  ASSERT_TRUE(q.ok()) << q.status();
  ModelRunnerOptions ro;
  ro.threads = 2;
  ro.kv_capacity = 256;
  auto runner = ModelRunner::Create(*(*q)->checkpoint, (*q)->config, ro);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const auto& model = dynamic_cast<const DecoderModel&>((*runner)->forward_model(Phase::kDecode));
  const ModelConfig& c = model.config();
  std::mt19937 rng(std::random_device{}());
  const int n = 4;
  std::vector<KvSequence> alone(n), together(n);
  std::vector<int32_t> next(n);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(6 + 5 * i);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
    next[i] = static_cast<int32_t>(rng() % c.vocab_size);
    for (KvSequence* s : {&alone[i], &together[i]}) {
      (*runner)->kv_pool().extend(*s, static_cast<int>(prompt.size()) + 1);
      BatchLogits l;
      ASSERT_TRUE((*runner)->Forward(Batch{Phase::kPrefill, {{s, prompt, false}}}, &l).ok());
    }
  }
  auto one = PlanDecodeStep(model.program(), c, {3, 2, 16, 1});
  auto four = PlanDecodeStep(model.program(), c, {3, 2, 16, n});
  ASSERT_TRUE(one.ok() && four.ok());
  std::vector<cpu::DecodeStepItem> items;
  for (int i = 0; i < n; ++i) items.push_back({&together[i], std::span(&next[i], 1)});
  std::vector<float> batched;
  ASSERT_TRUE(
      cpu::RunDecodeSchedule(*four, model.program(), c, items, (*runner)->kv_pool(), &batched)
          .ok());
  for (int i = 0; i < n; ++i) {
    const cpu::DecodeStepItem single[] = {{&alone[i], std::span(&next[i], 1)}};
    std::vector<float> logits;
    ASSERT_TRUE(
        cpu::RunDecodeSchedule(*one, model.program(), c, single, (*runner)->kv_pool(), &logits)
            .ok());
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(), batched.begin() + i * c.vocab_size))
        << "row " << i;
  }
  for (int i = 0; i < n; ++i) {
    (*runner)->kv_pool().release(alone[i]);
    (*runner)->kv_pool().release(together[i]);
  }
  std::filesystem::remove_all(dir);
}

TEST_F(DecodeScheduleExecutorTest, RefusesWhatItCannotRun) {
  std::unique_ptr<Model> m = testing::LoadTinyQwen3();
  ASSERT_NE(m, nullptr);
  auto runner = ModelRunner::Create(*m->checkpoint, m->config, {});
  ASSERT_TRUE(runner.ok());
  const auto& model = dynamic_cast<const DecoderModel&>((*runner)->forward_model(Phase::kDecode));
  auto plan = PlanDecodeStep(model.program(), m->config, {2, 1, 16, 2});
  ASSERT_TRUE(plan.ok());
  KvSequence seq;
  (*runner)->kv_pool().extend(seq, 1);
  std::vector<float> logits;
  const int32_t ok_token = 1, bad_low = -1, bad_high = m->config.vocab_size;
  const cpu::DecodeStepItem one[] = {{&seq, std::span(&ok_token, 1)}};
  EXPECT_EQ(
      cpu::RunDecodeSchedule(*plan, model.program(), m->config, one, (*runner)->kv_pool(), &logits)
          .code(),
      absl::StatusCode::kInvalidArgument);  // batch 1 for a batch-2 plan
  const cpu::DecodeStepItem bad[] = {{&seq, std::span(&bad_low, 1)},
                                     {&seq, std::span(&bad_high, 1)}};
  EXPECT_EQ(
      cpu::RunDecodeSchedule(*plan, model.program(), m->config, bad, (*runner)->kv_pool(), &logits)
          .code(),
      absl::StatusCode::kInvalidArgument);
  // RoPE folded into attention needs one new token per sequence: a verification pass of two
  // rows of one sequence is refused, saying so.
  auto fused = PlanDecodeStep(model.program(), m->config, {2, 1, 16, 2, true});
  ASSERT_TRUE(fused.ok());
  (*runner)->kv_pool().extend(seq, 2);
  const int32_t two[] = {1, 2};
  const cpu::DecodeStepItem verify[] = {{&seq, std::span(two, 2)}};
  const absl::Status refused = cpu::RunDecodeSchedule(*fused, model.program(), m->config, verify,
                                                      (*runner)->kv_pool(), &logits);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("one new token per sequence"), std::string::npos) << refused;
  (*runner)->kv_pool().release(seq);
}

}  // namespace
}  // namespace dq
