// A drafter conditioned on the target's hidden states (DFlash's interface) inside the decode
// batcher's continuous batching (docs/speculative.md, "Serving path"): with drafts that are
// right (an oracle: accepted runs), wrong (nothing accepted) or missing every other step (plain
// steps), and two sequences decoded together, every kept token's captured rows reach the drafter
// once, in position order with no gap, equal to the target's hidden states of that token in a
// fresh pass over the whole sequence, and the tokens are plain decoding's.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "decode_worker/decode_batcher.h"
#include "engine/generate/generator.h"
#include "engine/spec/hidden_capture.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq::decode {
namespace {
namespace v1 = dqserve::v1;

enum class Mode { kOracle, kWrong, kEveryOther };

// Proposes from known full sequences (prompt + plain output) and records what it observes.
class RecordingDrafter : public Drafter {
 public:
  RecordingDrafter(std::vector<std::vector<int32_t>> full, Mode mode, int vocab)
      : full_(std::move(full)), mode_(mode), vocab_(vocab) {}

  std::string_view name() const override { return "recording"; }
  bool deterministic() const override { return true; }
  absl::Status CheckTarget(const ModelConfig&) const override { return absl::OkStatus(); }
  std::span<const int> target_layers() const override { return layers_; }

  absl::Status Begin(uint64_t sequence, std::span<const int32_t> prompt) override {
    Seen& s = seen_[sequence];
    s.prompt.assign(prompt.begin(), prompt.end());
    s.next = static_cast<int>(prompt.size());  // the prompt's rows are not the batcher's
    return absl::OkStatus();
  }
  absl::Status Propose(std::span<const DraftRequest> requests, std::span<Draft> drafts) override {
    // kEveryOther: every other step drafts nothing for anyone (a plain step).
    const bool none = mode_ == Mode::kEveryOther && (calls_++ % 2 == 1);
    for (size_t i = 0; i < requests.size(); ++i) {
      drafts[i].tokens.clear();
      const auto& h = requests[i].history;
      if (none) continue;
      for (const auto& f : full_) {
        if (f.size() < h.size() || !std::equal(h.begin(), h.end(), f.begin())) continue;
        for (size_t p = h.size();
             p < f.size() && drafts[i].tokens.size() < static_cast<size_t>(requests[i].max_tokens);
             ++p) {
          drafts[i].tokens.push_back(mode_ == Mode::kWrong ? (f[p] + 1) % vocab_ : f[p]);
        }
      }
    }
    return absl::OkStatus();
  }
  void ObserveTarget(uint64_t sequence, int first, int count,
                     std::span<const float> features) override {
    Seen& s = seen_[sequence];
    if (first != s.next || count <= 0 || features.size() % count != 0) s.gap = true;
    const size_t width = count > 0 ? features.size() / count : 0;
    for (int t = 0; t < count; ++t) {
      s.rows.emplace_back(features.begin() + t * width, features.begin() + (t + 1) * width);
    }
    s.next = first + count;
  }

  struct Seen {
    std::vector<int32_t> prompt;
    int next = 0;  // the next position expected
    bool gap = false;
    std::vector<std::vector<float>> rows;  // positions prompt.size() ..
  };
  const std::map<uint64_t, Seen>& seen() const { return seen_; }

 private:
  const std::vector<int> layers_ = {1, 0};
  std::vector<std::vector<int32_t>> full_;
  Mode mode_;
  int vocab_;
  int calls_ = 0;
  std::map<uint64_t, Seen> seen_;
};

class DecodeBatcherHiddenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dq::testing::LoadTinyQwen3();
    ASSERT_NE(model_, nullptr);
    ModelRunnerOptions ro;
    ro.threads = 2;
    ro.kv_capacity = 1024;
    auto r = ModelRunner::Create(*model_->checkpoint, model_->config, ro);
    ASSERT_TRUE(r.ok()) << r.status();
    runner_ = std::move(*r);
    for (const char* text : {"Hello there, how are you", "1 2 3 4 5"}) {
      prompts_.push_back(model_->tokenizer.Encode(text));
    }
    // Plain decoding's tokens, then each whole sequence's hidden states in one fresh pass.
    std::vector<GenerationRequest> reqs;
    for (const auto& p : prompts_) {
      GenerationRequest g;
      g.prompt = p;
      g.params.max_tokens = kMaxTokens;
      g.params.temperature = 0;
      g.params.ignore_eos = true;
      reqs.push_back(g);
    }
    Generator gen(*runner_, model_->tokenizer, model_->config.eos_token_ids, {});
    auto plain = gen.Generate(reqs);
    ASSERT_TRUE(plain.ok()) << plain.status();
    for (size_t i = 0; i < reqs.size(); ++i) {
      outputs_.push_back((*plain)[i].tokens);
      full_.push_back(prompts_[i]);
      full_.back().insert(full_.back().end(), outputs_[i].begin(), outputs_[i].end());
      fresh_.push_back(Capture(full_.back()));
    }
  }

  std::vector<float> Capture(const std::vector<int32_t>& ids) {
    const std::vector<int> layers = {1, 0};
    HiddenCapture capture(layers, model_->config.num_layers, model_->config.hidden_size);
    KvSequence seq;
    runner_->kv_pool().extend(seq, static_cast<int>(ids.size()));
    BatchLogits logits;
    EXPECT_TRUE(
        runner_->Forward(Batch{Phase::kPrefill, {{&seq, ids, false}}}, &logits, capture.Hooks())
            .ok());
    runner_->kv_pool().release(seq);
    const auto rows = capture.Rows(0, static_cast<int64_t>(ids.size()));
    return std::vector<float>(rows.begin(), rows.end());
  }

  // The prefill worker's part, in place: the prompt into the lease's blocks, the first token.
  DecodeJob Prefill(KvLeaseTable& leases, size_t i) {
    const std::vector<int32_t>& p = prompts_[i];
    const std::string id = "r" + std::to_string(i);
    auto lease = leases.Reserve(id, static_cast<int>(p.size()) + kMaxTokens,
                                std::chrono::milliseconds(60000));
    EXPECT_TRUE(lease.ok()) << lease.status();
    KvSequence seq{lease->blocks, 0};
    BatchLogits logits;
    Batch batch{Phase::kPrefill, {{&seq, p, false}}};
    EXPECT_TRUE(runner_->Forward(batch, &logits).ok());
    const float* last = logits.last(0, batch);
    DecodeJob job;
    job.request_id = id;
    job.lease_id = lease->lease_id;
    job.num_tokens = static_cast<int>(p.size());
    job.first_token = static_cast<int32_t>(std::max_element(last, last + logits.vocab) - last);
    job.sampler_draws = 1;
    job.params.max_tokens = kMaxTokens;
    job.params.temperature = 0;
    job.params.ignore_eos = true;
    job.prompt = p;
    return job;
  }

  void ExpectKeptRowsReachTheDrafter(Mode mode) {
    RecordingDrafter drafter(full_, mode, model_->config.vocab_size);
    KvLeaseTable leases(runner_->kv_pool());
    std::vector<DecodeJob> jobs;
    for (size_t i = 0; i < prompts_.size(); ++i) jobs.push_back(Prefill(leases, i));
    std::vector<std::vector<int32_t>> got(prompts_.size());
    {
      DecodeBatcherOptions o;
      o.max_batch = 2;
      o.drafter = &drafter;
      o.spec.k = 4;
      DecodeBatcher batcher(*runner_, leases, std::move(o));
      std::vector<std::shared_ptr<DecodeStream>> streams;
      for (auto& j : jobs) {
        auto s = batcher.Submit(std::move(j));
        ASSERT_TRUE(s.ok()) << s.status();
        streams.push_back(*s);
      }
      for (size_t i = 0; i < streams.size(); ++i) {
        v1::DecodeResponse r;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!r.finished() && std::chrono::steady_clock::now() < end) {
          v1::DecodeResponse part;
          if (!streams[i]->Take(std::chrono::milliseconds(50), &part)) continue;
          got[i].insert(got[i].end(), part.token_ids().begin(), part.token_ids().end());
          r = part;
        }
        ASSERT_TRUE(r.finished()) << "request " << i << " did not finish";
        EXPECT_GT(r.spec_steps(), 0u);
        if (mode == Mode::kOracle) EXPECT_GT(r.draft_tokens_accepted(), 0u);
        if (mode == Mode::kWrong) EXPECT_EQ(r.draft_tokens_accepted(), 0u);
      }
    }
    EXPECT_EQ(leases.stats().free_blocks, runner_->kv_pool().num_free_blocks());
    ASSERT_EQ(drafter.seen().size(), prompts_.size());
    const int64_t width = 2 * model_->config.hidden_size;
    for (const auto& [seq, s] : drafter.seen()) {
      const size_t i = std::find(prompts_.begin(), prompts_.end(), s.prompt) - prompts_.begin();
      ASSERT_LT(i, prompts_.size());
      SCOPED_TRACE(::testing::Message() << "request " << i);
      EXPECT_EQ(got[i], outputs_[i]);
      EXPECT_FALSE(s.gap);
      // Every emitted token was fed and kept, but the last one only when the step that ended
      // the sequence had it as an accepted draft.
      EXPECT_GE(s.rows.size(), outputs_[i].size() - 1);
      EXPECT_LE(s.rows.size(), outputs_[i].size());
      for (size_t t = 0; t < s.rows.size(); ++t) {
        const size_t pos = prompts_[i].size() + t;
        ASSERT_EQ(static_cast<int64_t>(s.rows[t].size()), width);
        for (int64_t c = 0; c < width; ++c) {
          ASSERT_NEAR(s.rows[t][c], fresh_[i][pos * width + c], 1e-4f) << "position " << pos;
        }
      }
    }
  }

  static constexpr int kMaxTokens = 12;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<std::vector<int32_t>> prompts_, outputs_, full_;
  std::vector<std::vector<float>> fresh_;
};

TEST_F(DecodeBatcherHiddenTest, AcceptedDraftsRowsReachTheDrafter) {
  ExpectKeptRowsReachTheDrafter(Mode::kOracle);
}

TEST_F(DecodeBatcherHiddenTest, RejectedDraftsRowsNeverReachTheDrafter) {
  ExpectKeptRowsReachTheDrafter(Mode::kWrong);
}

TEST_F(DecodeBatcherHiddenTest, PlainStepsRowsReachTheDrafter) {
  ExpectKeptRowsReachTheDrafter(Mode::kEveryOther);
}

}  // namespace
}  // namespace dq::decode
