// dq-tool make-tiny: a tiny random Qwen3, Gemma 3 or Qwen3.5 checkpoint (config, safetensors,
// tokenizer) for tests.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/dtype.h"
#include "engine/checkpoint/safetensors_checkpoint.h"
#include "tools/dq_tool/commands.h"

namespace dq::tool {
namespace {

namespace fs = std::filesystem;

struct TinyOptions {
  std::string out;
  std::string tokenizer = "tests/golden/tokenizer/qwen-style/tokenizer.json";
  std::string chat_template = "tests/golden/chat/qwen3_template.jinja";
  uint64_t seed = 1;
  int hidden = 64;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 32;
  int intermediate = 128;
  int max_context = 4096;
  bool parallel = false;
  std::string dtype = "bf16";
  std::string arch = "qwen3";  // or "gemma3", "qwen3_5"
  int sliding_window = 8;      // gemma3: small, so that short prompts cross it
  // qwen3_5: the Gated DeltaNet layers' shape (three per full-attention layer).
  int gdn_key_heads = 2;
  int gdn_value_heads = 4;
  int gdn_head_dim = 16;  // key and value head dim
  int gdn_kernel = 4;
};

// Largest token id in a HF tokenizer.json, plus one.
int VocabSize(const nlohmann::json& tok) {
  int64_t max_id = -1;
  for (const auto& [_, id] : tok.at("model").at("vocab").items()) {
    max_id = std::max<int64_t>(max_id, id.get<int64_t>());
  }
  for (const auto& t : tok.value("added_tokens", nlohmann::json::array())) {
    max_id = std::max<int64_t>(max_id, t.at("id").get<int64_t>());
  }
  return static_cast<int>(max_id + 1);
}

int32_t TokenId(const nlohmann::json& tok, const std::string& content) {
  for (const auto& t : tok.value("added_tokens", nlohmann::json::array())) {
    if (t.at("content") == content) return t.at("id").get<int32_t>();
  }
  return -1;
}

// Random tensors owned until written. Scales keep activations O(1) through the layers, so the
// logits spread out and greedy top-1 is not a near tie.
//
// Parallel (--parallel): each 1M-value chunk of a tensor gets its own generator seeded from
// (seed, tensor, chunk) and the chunks are drawn on all cores, so a multi-billion-parameter
// benchmark model takes seconds; the values differ from the sequential stream (which the tests'
// tiny models keep).
class TensorMaker {
 public:
  TensorMaker(uint64_t seed, DType dtype, bool parallel)
      : seed_(seed), rng_(seed), dtype_(dtype), parallel_(parallel) {}
  void Add(const std::string& name, std::vector<int64_t> shape, float mean, float stddev) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    auto& buf = buffers_.emplace_back(n * (dtype_ == DType::kF32 ? 4 : 2));
    if (!parallel_) {
      Fill(rng_, mean, stddev, buf.data(), 0, n);
    } else {
      constexpr int64_t kChunk = 1 << 20;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      std::atomic<int64_t> next{0};
      auto work = [&] {
        for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
          std::mt19937_64 rng(seed_ ^ (entries_.size() * 0x9E3779B97F4A7C15ull) ^ (c << 20));
          Fill(rng, mean, stddev, buf.data(), c * kChunk, std::min(n, (c + 1) * kChunk));
        }
      };
      std::vector<std::thread> threads;
      const int nt = std::max(1u, std::thread::hardware_concurrency());
      for (int t = 0; t < nt; ++t) threads.emplace_back(work);
      for (auto& t : threads) t.join();
    }
    entries_.push_back({name, dtype_, std::move(shape), buf.data()});
  }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }

 private:
  void Fill(std::mt19937_64& rng, float mean, float stddev, uint8_t* buf, int64_t begin,
            int64_t end) const {
    std::normal_distribution<float> dist(mean, stddev);
    for (int64_t i = begin; i < end; ++i) {
      const float v = dist(rng);
      if (dtype_ == DType::kF32) {
        std::memcpy(&buf[i * 4], &v, 4);
      } else {
        const uint16_t b = F32ToBF16(v);
        std::memcpy(&buf[i * 2], &b, 2);
      }
    }
  }

  uint64_t seed_;
  std::mt19937_64 rng_;
  DType dtype_;
  bool parallel_;
  std::deque<std::vector<uint8_t>> buffers_;
  std::vector<SafetensorsEntry> entries_;
};

nlohmann::json MakeConfig(const TinyOptions& o, int vocab, const nlohmann::json& tok) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"vocab_size", vocab},
          {"hidden_size", o.hidden},
          {"intermediate_size", o.intermediate},
          {"num_hidden_layers", o.layers},
          {"num_attention_heads", o.heads},
          {"num_key_value_heads", o.kv_heads},
          {"head_dim", o.head_dim},
          {"hidden_act", "silu"},
          {"max_position_embeddings", o.max_context},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"tie_word_embeddings", true},
          {"attention_bias", false},
          {"torch_dtype", o.dtype == "f32" ? "float32" : "bfloat16"},
          {"bos_token_id", TokenId(tok, "<|endoftext|>")},
          {"eos_token_id", TokenId(tok, "<|im_end|>")}};
}

// Layer `p`'s q/k/v/o, its q/k norms (drawn around `norm_mean`) and its MLP, in the order the
// committed goldens' random streams depend on.
void AddLayerBody(const TinyOptions& o, const std::string& p, float norm_mean, TensorMaker& m) {
  const float in_std = 1.0f / std::sqrt(static_cast<float>(o.hidden));
  const float mlp_std = 1.0f / std::sqrt(static_cast<float>(o.intermediate));
  m.Add(p + "self_attn.q_proj.weight", {o.heads * o.head_dim, o.hidden}, 0.0f, in_std);
  m.Add(p + "self_attn.k_proj.weight", {o.kv_heads * o.head_dim, o.hidden}, 0.0f, in_std);
  m.Add(p + "self_attn.v_proj.weight", {o.kv_heads * o.head_dim, o.hidden}, 0.0f, in_std);
  m.Add(p + "self_attn.o_proj.weight", {o.hidden, o.heads * o.head_dim}, 0.0f, in_std);
  m.Add(p + "self_attn.q_norm.weight", {o.head_dim}, norm_mean, 0.1f);
  m.Add(p + "self_attn.k_norm.weight", {o.head_dim}, norm_mean, 0.1f);
  m.Add(p + "mlp.gate_proj.weight", {o.intermediate, o.hidden}, 0.0f, in_std);
  m.Add(p + "mlp.up_proj.weight", {o.intermediate, o.hidden}, 0.0f, in_std);
  m.Add(p + "mlp.down_proj.weight", {o.hidden, o.intermediate}, 0.0f, mlp_std);
}

// Gemma3ForCausalLM's text config: five sliding-window layers per global one.
nlohmann::json MakeGemma3Config(const TinyOptions& o, int vocab, const nlohmann::json& tok) {
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < o.layers; ++i) {
    types.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  }
  nlohmann::json c = MakeConfig(o, vocab, tok);
  c["architectures"] = {"Gemma3ForCausalLM"};
  c["model_type"] = "gemma3_text";
  c.erase("hidden_act");
  c.erase("rope_theta");
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["sliding_window"] = o.sliding_window;
  c["layer_types"] = types;
  c["query_pre_attn_scalar"] = o.head_dim;
  c["rope_parameters"] = {
      {"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  c["final_logit_softcapping"] = nullptr;
  c["attn_logit_softcapping"] = nullptr;
  return c;
}

// Gemma's norms multiply by (1 + w): their weights are drawn around 0.
void AddGemma3Weights(const TinyOptions& o, int vocab, TensorMaker& m) {
  // The embedding is scaled by sqrt(hidden) on the way in, and tied to the lm_head.
  m.Add("model.embed_tokens.weight", {vocab, o.hidden}, 0.0f, 0.2f);
  m.Add("model.norm.weight", {o.hidden}, 0.0f, 0.1f);
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* norm : {"input_layernorm", "post_attention_layernorm",
                             "pre_feedforward_layernorm", "post_feedforward_layernorm"}) {
      m.Add(p + norm + ".weight", {o.hidden}, 0.0f, 0.1f);
    }
    AddLayerBody(o, p, 0.0f, m);
  }
}

// Qwen3_5ForCausalLM's text config: a full-attention layer after every three GDN layers.
nlohmann::json MakeQwen3_5Config(const TinyOptions& o, int vocab, const nlohmann::json& tok) {
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < o.layers; ++i) {
    types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  }
  nlohmann::json c = MakeConfig(o, vocab, tok);
  c["architectures"] = {"Qwen3_5ForCausalLM"};
  c["model_type"] = "qwen3_5_text";
  c.erase("rope_theta");
  c["layer_types"] = types;
  c["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}};
  c["linear_num_key_heads"] = o.gdn_key_heads;
  c["linear_num_value_heads"] = o.gdn_value_heads;
  c["linear_key_head_dim"] = o.gdn_head_dim;
  c["linear_value_head_dim"] = o.gdn_head_dim;
  c["linear_conv_kernel_dim"] = o.gdn_kernel;
  return c;
}

// Zero-centred norms (1 + w) drawn around 0; the GDN's gated norm (w) around 1. A_log is drawn
// so that A = exp(A_log) spreads around 1 (HF draws A in [0.01, 16]).
void AddQwen3_5Weights(const TinyOptions& o, int vocab, TensorMaker& m) {
  const float in_std = 1.0f / std::sqrt(static_cast<float>(o.hidden));
  const int key_dim = o.gdn_key_heads * o.gdn_head_dim,
            value_dim = o.gdn_value_heads * o.gdn_head_dim;
  const int conv_dim = 2 * key_dim + value_dim;
  m.Add("model.embed_tokens.weight", {vocab, o.hidden}, 0.0f, 0.2f);
  m.Add("model.norm.weight", {o.hidden}, 0.0f, 0.1f);
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m.Add(p + "input_layernorm.weight", {o.hidden}, 0.0f, 0.1f);
    m.Add(p + "post_attention_layernorm.weight", {o.hidden}, 0.0f, 0.1f);
    const float mlp_std = 1.0f / std::sqrt(static_cast<float>(o.intermediate));
    auto mlp = [&] {
      m.Add(p + "mlp.gate_proj.weight", {o.intermediate, o.hidden}, 0.0f, in_std);
      m.Add(p + "mlp.up_proj.weight", {o.intermediate, o.hidden}, 0.0f, in_std);
      m.Add(p + "mlp.down_proj.weight", {o.hidden, o.intermediate}, 0.0f, mlp_std);
    };
    if ((i + 1) % 4 == 0) {
      const std::string a = p + "self_attn.";
      // q_proj holds [q | gate] per head.
      m.Add(a + "q_proj.weight", {2 * o.heads * o.head_dim, o.hidden}, 0.0f, in_std);
      m.Add(a + "k_proj.weight", {o.kv_heads * o.head_dim, o.hidden}, 0.0f, in_std);
      m.Add(a + "v_proj.weight", {o.kv_heads * o.head_dim, o.hidden}, 0.0f, in_std);
      m.Add(a + "o_proj.weight", {o.hidden, o.heads * o.head_dim}, 0.0f, in_std);
      m.Add(a + "q_norm.weight", {o.head_dim}, 0.0f, 0.1f);
      m.Add(a + "k_norm.weight", {o.head_dim}, 0.0f, 0.1f);
      mlp();
      continue;
    }
    const std::string g = p + "linear_attn.";
    m.Add(g + "in_proj_qkv.weight", {conv_dim, o.hidden}, 0.0f, in_std);
    m.Add(g + "in_proj_z.weight", {value_dim, o.hidden}, 0.0f, in_std);
    m.Add(g + "in_proj_b.weight", {o.gdn_value_heads, o.hidden}, 0.0f, in_std);
    m.Add(g + "in_proj_a.weight", {o.gdn_value_heads, o.hidden}, 0.0f, in_std);
    m.Add(g + "conv1d.weight", {conv_dim, 1, o.gdn_kernel}, 0.0f, 0.5f);
    m.Add(g + "dt_bias", {o.gdn_value_heads}, 1.0f, 0.1f);
    m.Add(g + "A_log", {o.gdn_value_heads}, 0.0f, 1.0f);
    m.Add(g + "norm.weight", {o.gdn_head_dim}, 1.0f, 0.1f);
    m.Add(g + "out_proj.weight", {o.hidden, value_dim}, 0.0f, in_std);
    mlp();
  }
}

void AddWeights(const TinyOptions& o, int vocab, TensorMaker& m) {
  // Tied embeddings: 0.2 keeps the logits' spread near 1.6 so sampling is not one-hot.
  m.Add("model.embed_tokens.weight", {vocab, o.hidden}, 0.0f, 0.2f);
  m.Add("model.norm.weight", {o.hidden}, 1.0f, 0.1f);
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m.Add(p + "input_layernorm.weight", {o.hidden}, 1.0f, 0.1f);
    m.Add(p + "post_attention_layernorm.weight", {o.hidden}, 1.0f, 0.1f);
    AddLayerBody(o, p, 1.0f, m);
  }
}

absl::Status MakeTiny(const TinyOptions& o) {
  if (o.dtype != "bf16" && o.dtype != "f32") {
    return absl::InvalidArgumentError("--dtype must be bf16 or f32");
  }
  std::ifstream tf(o.tokenizer);
  if (!tf) return absl::NotFoundError("cannot read tokenizer " + o.tokenizer);
  const nlohmann::json tok = nlohmann::json::parse(tf, nullptr, /*allow_exceptions=*/false);
  if (tok.is_discarded() || !tok.contains("model")) {
    return absl::InvalidArgumentError(o.tokenizer + " is not a HF tokenizer.json");
  }
  std::ifstream cf(o.chat_template);
  if (!cf) return absl::NotFoundError("cannot read chat template " + o.chat_template);
  const std::string chat((std::istreambuf_iterator<char>(cf)), std::istreambuf_iterator<char>());
  const int vocab = (VocabSize(tok) + 63) / 64 * 64;  // padded like real checkpoints
  fs::create_directories(o.out);
  if (o.arch != "qwen3" && o.arch != "gemma3" && o.arch != "qwen3_5") {
    return absl::InvalidArgumentError("--arch must be qwen3, gemma3 or qwen3_5");
  }
  const bool gemma = o.arch == "gemma3", qwen3_5 = o.arch == "qwen3_5";
  const nlohmann::json config = gemma     ? MakeGemma3Config(o, vocab, tok)
                                : qwen3_5 ? MakeQwen3_5Config(o, vocab, tok)
                                          : MakeConfig(o, vocab, tok);
  std::ofstream(fs::path(o.out) / "config.json") << config.dump(2) << "\n";
  fs::copy_file(o.tokenizer, fs::path(o.out) / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  nlohmann::json tok_config = {{"chat_template", chat},
                               {"eos_token", "<|im_end|>"},
                               {"pad_token", "<|endoftext|>"},
                               {"model_max_length", o.max_context}};
  // Not Gemma's (or Qwen3.5's) own tokenizer: without this, transformers picks the model type's.
  if (gemma || qwen3_5) tok_config["tokenizer_class"] = "PreTrainedTokenizerFast";
  std::ofstream(fs::path(o.out) / "tokenizer_config.json") << tok_config.dump(2) << "\n";
  TensorMaker maker(o.seed, o.dtype == "f32" ? DType::kF32 : DType::kBF16, o.parallel);
  if (gemma) {
    AddGemma3Weights(o, vocab, maker);
  } else if (qwen3_5) {
    AddQwen3_5Weights(o, vocab, maker);
  } else {
    AddWeights(o, vocab, maker);
  }
  return WriteSafetensors((fs::path(o.out) / "model.safetensors").string(), maker.entries(),
                          {{"format", "pt"}});
}

}  // namespace

void RegisterMakeTiny(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TinyOptions>();
  CLI::App* cmd =
      app.add_subcommand("make-tiny", "write a tiny random Qwen3, Gemma 3 or Qwen3.5 checkpoint");
  cmd->add_option("--out", opts->out, "output directory")->required();
  cmd->add_option("--tokenizer", opts->tokenizer, "HF tokenizer.json to copy");
  cmd->add_option("--chat-template", opts->chat_template, "Jinja chat template file");
  cmd->add_option("--seed", opts->seed, "random seed");
  cmd->add_option("--hidden", opts->hidden, "hidden size");
  cmd->add_option("--layers", opts->layers, "layers");
  cmd->add_option("--heads", opts->heads, "attention heads");
  cmd->add_option("--kv-heads", opts->kv_heads, "KV heads");
  cmd->add_option("--head-dim", opts->head_dim, "head dim");
  cmd->add_option("--intermediate", opts->intermediate, "MLP size");
  cmd->add_option("--dtype", opts->dtype, "bf16 or f32");
  cmd->add_option("--max-context", opts->max_context, "max_position_embeddings (default 4096)")
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--arch", opts->arch, "qwen3 (default), gemma3 or qwen3_5")
      ->check(CLI::IsMember({"qwen3", "gemma3", "qwen3_5"}));
  cmd->add_option("--sliding-window", opts->sliding_window,
                  "gemma3: positions a sliding-window layer sees (default 8)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--parallel", opts->parallel,
                "draw the weights on every core (other values than the default sequential draw; "
                "for large benchmark models)");
  cmd->callback([opts, exit_code] {
    const absl::Status s = MakeTiny(*opts);
    if (!s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      *exit_code = 1;
      return;
    }
    std::cout << "wrote tiny "
              << (opts->arch == "gemma3"    ? "Gemma 3"
                  : opts->arch == "qwen3_5" ? "Qwen3.5"
                                            : "Qwen3")
              << " checkpoint to " << opts->out << "\n";
  });
}

}  // namespace dq::tool
