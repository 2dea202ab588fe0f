// dq-bench-cpu: prefill and decode speed of the CPU backend on one model, as JSON.
//   dq-bench-cpu --model M [--prompt-tokens 128] [--gen-tokens 128] [--threads N] [--reps 3]
//                [--cpu-matmul q8|exact]
// Prefill: one forward over a prompt of random (but valid, non-special) token ids.
// Decode: greedy single-sequence steps after that prompt. Best of `reps` runs (decode also as
// the median of the runs: the cores here are shared).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "common/cpu_matmul.h"
#include "common/logging.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  int prompt_tokens = 128;
  int gen_tokens = 128;
  int threads = 0;
  int reps = 3;
  std::string cpu_matmul = "q8";  // "q8" or "exact" (common/cpu_matmul.h)
};

struct Timing {
  double prefill_s = 1e30;
  double decode_s = 1e30;
  std::vector<double> decode_runs;  // every timed run's decode seconds (for the median)
};

// The median of `v` (the mean of the middle two for an even count); 0 for none.
double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

absl::Status RunOnce(dq::ModelRunner& runner, const std::vector<int32_t>& prompt, int gen,
                     Timing* best) {
  dq::KvSequence seq;
  dq::KvBlockPool& pool = runner.kv_pool();
  pool.extend(seq, static_cast<int>(prompt.size()) + gen);
  dq::BatchLogits logits;
  auto t0 = Clock::now();
  dq::Batch prefill{dq::Phase::kPrefill, {{&seq, prompt, false}}};
  DQ_RETURN_IF_ERROR(runner.Forward(prefill, &logits));
  auto t1 = Clock::now();
  int32_t next = 0;
  for (int i = 0; i < gen; ++i) {
    const float* row = logits.row(0);
    next = static_cast<int32_t>(std::max_element(row, row + logits.vocab) - row);
    dq::Batch step{dq::Phase::kDecode, {{&seq, std::span<const int32_t>(&next, 1), false}}};
    DQ_RETURN_IF_ERROR(runner.Forward(step, &logits));
  }
  auto t2 = Clock::now();
  pool.release(seq);
  best->prefill_s = std::min(best->prefill_s, std::chrono::duration<double>(t1 - t0).count());
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  best->decode_s = std::min(best->decode_s, decode_s);
  best->decode_runs.push_back(decode_s);
  return absl::OkStatus();
}

absl::Status Run(const Options& o) {
  DQ_ASSIGN_OR_RETURN(auto model, dq::LoadModel(o.model));
  dq::ModelRunnerOptions ro;
  ro.threads = o.threads;
  ro.kv_capacity = o.prompt_tokens + o.gen_tokens + 16;
  DQ_ASSIGN_OR_RETURN(const dq::CpuMatmul cpu_matmul, dq::ParseCpuMatmul(o.cpu_matmul));
  ro.cpu_q8_decode = cpu_matmul == dq::CpuMatmul::kQ8;
  DQ_ASSIGN_OR_RETURN(auto runner, dq::ModelRunner::Create(*model->checkpoint, model->config, ro));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> dist(1000, std::min(model->config.vocab_size, 40000) - 1);
  std::vector<int32_t> prompt(o.prompt_tokens);
  for (auto& t : prompt) t = dist(rng);
  Timing best;
  DQ_RETURN_IF_ERROR(RunOnce(*runner, prompt, 8, &best));  // warm-up: page in the weights
  best = Timing{};
  for (int r = 0; r < o.reps; ++r)
    DQ_RETURN_IF_ERROR(RunOnce(*runner, prompt, o.gen_tokens, &best));
  nlohmann::json j = {
      {"engine", ro.cpu_q8_decode ? "dqserve-cpu (q8 decode)" : "dqserve-cpu (exact)"},
      {"model", o.model},
      {"threads", runner->threads().num_threads()},
      {"prompt_tokens", o.prompt_tokens},
      {"gen_tokens", o.gen_tokens},
      {"reps", o.reps},
      {"prefill_seconds", best.prefill_s},
      {"prefill_tok_per_s", o.prompt_tokens / best.prefill_s},
      {"decode_seconds", best.decode_s},
      {"decode_tok_per_s", o.gen_tokens / best.decode_s},
      {"decode_tok_per_s_median", o.gen_tokens / Median(best.decode_runs)}};
  std::cout << j.dump(2) << "\n";
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-bench-cpu: CPU backend prefill/decode speed"};
  Options o;
  app.add_option("--model", o.model, "a .gguf file or HF checkpoint directory")->required();
  app.add_option("--prompt-tokens", o.prompt_tokens, "prompt length");
  app.add_option("--gen-tokens", o.gen_tokens, "tokens to decode");
  app.add_option("--threads", o.threads, "CPU threads (default: all)");
  app.add_option("--reps", o.reps, "timed repetitions (best is reported)");
  app.add_option("--cpu-matmul", o.cpu_matmul, dq::kCpuMatmulHelp)
      ->check(CLI::IsMember(
          std::vector<std::string>(dq::kCpuMatmulModes.begin(), dq::kCpuMatmulModes.end())))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const absl::Status s = Run(o);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
