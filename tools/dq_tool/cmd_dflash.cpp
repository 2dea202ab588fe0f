// dq-tool make-dflash: a random-weight DFlash drafter checkpoint for a given target (tests).
// dq-tool dflash-dump: the target's captured hidden states for some tokens and our DFlash
// drafter's logits for two blocks over them, as one safetensors file, which
// tests/gpu/dflash_reference.py recomputes in PyTorch.
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors_checkpoint.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/spec/dflash_checkpoint_maker.h"
#include "engine/spec/dflash_drafter.h"
#include "engine/spec/hidden_capture.h"
#include "tools/dq_tool/commands.h"

namespace dq::tool {
namespace {

struct MakeOptions {
  std::string target;
  std::string out;
  RandomDFlashOptions random;
};

absl::Status MakeDFlash(const MakeOptions& o) {
  DQ_ASSIGN_OR_RETURN(auto target, LoadModel(o.target));
  return WriteRandomDFlashCheckpoint(target->config, o.random, o.out);
}

struct DumpOptions {
  std::string target;
  std::string draft;
  std::string ids;  // JSON array of token ids
  int split = 0;    // the first block is anchored at this position (0: half the tokens)
  std::string out;
  int threads = 0;
};

// Step a: context [0, split), block anchored on ids[split]. Step b: the context grows to
// [0, n - 1) from the drafter's cache plus the new rows, block anchored on ids[n - 1].
absl::Status DumpDFlash(const DumpOptions& o) {
  const nlohmann::json j = nlohmann::json::parse(o.ids, nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.size() < 3) {
    return absl::InvalidArgumentError("--ids must be a JSON array of at least 3 token ids");
  }
  const std::vector<int32_t> ids = j.get<std::vector<int32_t>>();
  const int n = static_cast<int>(ids.size());
  const int split = o.split > 0 ? o.split : n / 2;
  if (split < 1 || split >= n - 1) {
    return absl::InvalidArgumentError(absl::StrCat("--split must be in [1, ", n - 2, "]"));
  }
  DQ_ASSIGN_OR_RETURN(auto target, LoadModel(o.target));
  ModelRunnerOptions ro;
  ro.threads = o.threads;
  DQ_ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(*target->checkpoint, target->config, ro));
  DFlashDrafterOptions dopts;
  dopts.threads = o.threads;
  std::unique_ptr<Checkpoint> draft_ckpt;
  DQ_ASSIGN_OR_RETURN(auto drafter, DFlashDrafter::Load(o.draft, *target->checkpoint,
                                                        target->config, dopts, &draft_ckpt));
  HiddenCapture capture(drafter->target_layers(), target->config.num_layers,
                        target->config.hidden_size);
  KvSequence seq;
  runner->kv_pool().extend(seq, n);
  BatchLogits target_logits;
  DQ_RETURN_IF_ERROR(runner->Forward(Batch{Phase::kPrefill, {{&seq, ids, false}}}, &target_logits,
                                     capture.Hooks()));
  runner->kv_pool().release(seq);
  const std::vector<float> features(capture.Rows(0, n).begin(), capture.Rows(0, n).end());
  DQ_RETURN_IF_ERROR(drafter->Begin(0, ids));
  drafter->ObserveTarget(0, 0, split, capture.Rows(0, split));
  DQ_ASSIGN_OR_RETURN(const std::vector<float> a, drafter->BlockLogits(0, ids[split], split));
  drafter->ObserveTarget(0, split, n - 1 - split, capture.Rows(split, n - 1 - split));
  DQ_ASSIGN_OR_RETURN(const std::vector<float> b, drafter->BlockLogits(0, ids[n - 1], n - 1));
  drafter->End(0);
  const int64_t rows = drafter->config().block_size - 1;
  const int64_t vocab = target->config.vocab_size;
  return WriteSafetensors(o.out,
                          {{"tokens", DType::kI32, {n}, ids.data()},
                           {"features", DType::kF32, {n, capture.width()}, features.data()},
                           {"logits_a", DType::kF32, {rows, vocab}, a.data()},
                           {"logits_b", DType::kF32, {rows, vocab}, b.data()}},
                          {{"split", std::to_string(split)}});
}

void Fail(const absl::Status& s, int* exit_code) {
  std::cerr << "error: " << s.message() << "\n";
  *exit_code = 1;
}

}  // namespace

void RegisterDFlash(CLI::App& app, int* exit_code) {
  auto m = std::make_shared<MakeOptions>();
  CLI::App* make =
      app.add_subcommand("make-dflash",
                         "write a random-weight DFlash drafter checkpoint (published layout) for a "
                         "target");
  make->add_option("--target", m->target, "the target model (directory or .gguf)")->required();
  make->add_option("--out", m->out, "output directory")->required();
  make->add_option("--layers", m->random.layers, "draft layers (default 1)");
  make->add_option("--target-layers", m->random.target_layer_ids,
                   "target layer ids fc reads (default: first, middle, last)")
      ->delimiter(',');
  make->add_option("--block-size", m->random.block_size, "block size (default 8)");
  make->add_option("--mask-token-id", m->random.mask_token_id, "default: the last vocabulary id");
  make->add_option("--heads", m->random.heads, "attention heads (default: the target's)");
  make->add_option("--kv-heads", m->random.kv_heads, "KV heads (default: the target's)");
  make->add_option("--head-dim", m->random.head_dim, "head dim (default: the target's)");
  make->add_option("--intermediate", m->random.intermediate, "MLP size (default: the target's)");
  make->add_option("--seed", m->random.seed, "random seed");
  make->add_flag("--f32", m->random.f32, "f32 weights (default bf16)");
  make->callback([m, exit_code] {
    const absl::Status s = MakeDFlash(*m);
    if (!s.ok()) return Fail(s, exit_code);
    std::cout << "wrote random DFlash drafter to " << m->out << "\n";
  });

  auto d = std::make_shared<DumpOptions>();
  CLI::App* dump = app.add_subcommand(
      "dflash-dump", "the target's hidden states and the DFlash drafter's logits for two blocks");
  dump->add_option("--target", d->target, "the target model")->required();
  dump->add_option("--draft", d->draft, "the DFlash checkpoint directory")->required();
  dump->add_option("--ids", d->ids, "JSON array of token ids (at least 3)")->required();
  dump->add_option("--split", d->split, "first block's anchor position (default: n / 2)");
  dump->add_option("--out", d->out, "output .safetensors file")->required();
  dump->add_option("--threads", d->threads, "CPU threads (default: all)");
  dump->callback([d, exit_code] {
    const absl::Status s = DumpDFlash(*d);
    if (!s.ok()) return Fail(s, exit_code);
    std::cout << "wrote " << d->out << "\n";
  });
}

}  // namespace dq::tool
