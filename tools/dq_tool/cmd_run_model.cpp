// dq-tool logits: one prefill + greedy continuation, printed as JSON (for golden comparisons
// and debugging numerics).
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tools/dq_tool/commands.h"

namespace dq::tool {
namespace {

struct LogitsOptions {
  std::string model;
  std::string ids;
  int greedy = 8;
  int top = 10;
  int threads = 0;
};

int32_t Argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

absl::Status RunLogits(const LogitsOptions& o) {
  const nlohmann::json j = nlohmann::json::parse(o.ids, nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) {
    return absl::InvalidArgumentError("--ids must be a non-empty JSON array of token ids");
  }
  std::vector<int32_t> ids = j.get<std::vector<int32_t>>();
  DQ_ASSIGN_OR_RETURN(auto model, LoadModel(o.model));
  ModelRunnerOptions ro;
  ro.threads = o.threads;
  DQ_ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(*model->checkpoint, model->config, ro));
  KvSequence seq;
  KvBlockPool& pool = runner->kv_pool();
  const int total = static_cast<int>(ids.size()) + o.greedy;
  if (!pool.can_extend(seq, total)) return absl::ResourceExhaustedError("KV pool too small");
  pool.extend(seq, total);
  Batch batch{Phase::kPrefill, {{&seq, ids, false}}};
  BatchLogits logits;
  DQ_RETURN_IF_ERROR(runner->Forward(batch, &logits));
  const int vocab = logits.vocab;
  std::vector<float> last(logits.last(0, batch), logits.last(0, batch) + vocab);
  std::vector<int32_t> order(vocab);
  for (int i = 0; i < vocab; ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + std::min(o.top, vocab), order.end(),
                    [&](int32_t a, int32_t b) { return last[a] > last[b]; });
  nlohmann::json top = nlohmann::json::array();
  for (int i = 0; i < std::min(o.top, vocab); ++i) top.push_back({order[i], last[order[i]]});
  std::vector<int32_t> greedy;
  int32_t next = Argmax(last.data(), vocab);
  for (int step = 0; step < o.greedy; ++step) {
    greedy.push_back(next);
    if (step + 1 == o.greedy) break;
    Batch d{Phase::kDecode, {{&seq, std::span<const int32_t>(&greedy.back(), 1), false}}};
    DQ_RETURN_IF_ERROR(runner->Forward(d, &logits));
    next = Argmax(logits.last(0, d), vocab);
  }
  pool.release(seq);
  std::cout << nlohmann::json{{"ids", ids}, {"top", top}, {"greedy", greedy}}.dump() << "\n";
  return absl::OkStatus();
}

}  // namespace

void RegisterRunModel(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "prefill ids; print top logits + greedy ids");
  cmd->add_option("--model", o->model, "a .gguf file or a HF checkpoint directory")->required();
  cmd->add_option("--ids", o->ids, "JSON array of prompt token ids")->required();
  cmd->add_option("--greedy", o->greedy, "greedy tokens to generate");
  cmd->add_option("--top", o->top, "logits to print");
  cmd->add_option("--threads", o->threads, "CPU threads");
  cmd->callback([o, exit_code] {
    const absl::Status s = RunLogits(*o);
    if (!s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      *exit_code = 1;
    }
  });
}

}  // namespace dq::tool
