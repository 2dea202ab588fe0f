#include "common/deploy_config.h"

#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/cpu_matmul.h"
#include "common/device_spec.h"
#include "common/listen_port.h"
#include "common/lm_head_format.h"

namespace dq {
namespace {

// Reads the keys of one table into fields, refusing keys nobody reads.
class TableReader {
 public:
  TableReader(const toml::table& t, std::string where) : t_(t), where_(std::move(where)) {}

  template <typename T>
  void Get(const char* key, T* out) {
    seen_.insert(key);
    const toml::node* n = t_.get(key);
    if (n == nullptr || !status_.ok()) return;
    if constexpr (std::is_same_v<T, std::string>) {
      if (auto v = n->value<std::string>()) return void(*out = *v);
      Fail(key, "a string");
    } else if constexpr (std::is_same_v<T, bool>) {
      if (auto v = n->value<bool>()) return void(*out = *v);
      Fail(key, "true or false");
    } else {
      if (auto v = n->value<int64_t>()) {
        if (*v < 0 || *v > std::numeric_limits<T>::max())
          return Fail(key, "a non-negative integer");
        return void(*out = static_cast<T>(*v));
      }
      Fail(key, "an integer");
    }
  }

  absl::Status Finish() {
    if (!status_.ok()) return status_;
    for (const auto& [k, v] : t_) {
      const std::string key(k.str());
      if (!seen_.count(key) && !v.is_table()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where_, ": unknown key \"", key, "\"; see common/deploy_config.h"));
      }
    }
    return absl::OkStatus();
  }

 private:
  void Fail(const char* key, const char* want) {
    status_ = absl::InvalidArgumentError(absl::StrCat(where_, ": \"", key, "\" must be ", want));
  }
  const toml::table& t_;
  std::string where_;
  std::set<std::string> seen_;
  absl::Status status_;
};

std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || base_dir.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

absl::Status ReadPhase(const toml::table& t, const std::string& name, PhaseConfig* p) {
  TableReader r(t, "[" + name + "]");
  r.Get("weights", &p->weights);
  r.Get("compute", &p->compute);
  r.Get("device", &p->device);
  r.Get("threads", &p->threads);
  r.Get("kv_capacity", &p->kv_capacity);
  r.Get("port", &p->port);
  r.Get("cpu_matmul", &p->cpu_matmul);
  if (name == "prefill") {
    r.Get("token_budget", &p->token_budget);
    r.Get("attention", &p->attention);
  }
  if (name == "decode") {
    r.Get("max_batch", &p->max_batch);
    r.Get("lease_ttl_ms", &p->lease_ttl_ms);
    r.Get("speculative", &p->speculative);
    r.Get("spec_k", &p->spec_k);
    r.Get("draft_format", &p->draft_format);
    r.Get("draft_group_size", &p->draft_group_size);
    r.Get("draft_weights", &p->draft_weights);
    r.Get("draft_on_prefill", &p->draft_on_prefill);
    r.Get("batch_invariant", &p->batch_invariant);
    r.Get("lm_head", &p->lm_head);
  }
  return r.Finish();
}

// [decode] speculative and the drafter's weights (docs/speculative.md).
absl::Status CheckDrafter(const DeployConfig& c) {
  const PhaseConfig& d = c.decode;
  if (d.speculative != "none" && d.speculative != "ngram" && d.speculative != "self" &&
      d.speculative != "dflash") {
    return absl::InvalidArgumentError(
        absl::StrCat("[decode] speculative must be \"none\", \"ngram\", \"self\" or "
                     "\"dflash\", got \"",
                     d.speculative, "\""));
  }
  const bool has_weights = !d.draft_format.empty() || !d.draft_weights.empty();
  if (d.speculative == "self" && d.draft_format.empty() == d.draft_weights.empty()) {
    return absl::InvalidArgumentError(
        "[decode] speculative = \"self\" needs exactly one of draft_format (e.g. \"int4\": the "
        "model quantized at load) and draft_weights (a checkpoint)");
  }
  if (d.speculative == "dflash") {
    if (d.draft_weights.empty() || !d.draft_format.empty() || d.draft_group_size != 0) {
      return absl::InvalidArgumentError(
          "[decode] speculative = \"dflash\" needs draft_weights (the DFlash drafter's "
          "directory, made for this model) and no draft_format/draft_group_size");
    }
  }
  if ((d.speculative == "none" || d.speculative == "ngram") && has_weights) {
    return absl::InvalidArgumentError(
        "[decode] draft_format/draft_weights are the self or dflash drafter's: set speculative "
        "= \"self\" (or \"dflash\" with draft_weights)");
  }
  return absl::OkStatus();
}

absl::Status ReadRouter(const toml::table& t, RouterConfig* c) {
  TableReader r(t, "[router]");
  r.Get("host", &c->host);
  r.Get("port", &c->port);
  r.Get("grpc_port", &c->grpc_port);
  r.Get("api_key_env", &c->api_key_env);
  r.Get("max_in_flight", &c->max_in_flight);
  r.Get("max_queue", &c->max_queue);
  r.Get("queue_timeout_ms", &c->queue_timeout_ms);
  r.Get("request_timeout_ms", &c->request_timeout_ms);
  r.Get("max_body_bytes", &c->max_body_bytes);
  r.Get("special_tokens_in_content", &c->special_tokens_in_content);
  r.Get("tool_call_parser", &c->tool_call_parser);
  DQ_RETURN_IF_ERROR(r.Finish());
  const std::string& p = c->tool_call_parser;
  if (p != "auto" && p != "hermes" && p != "llama3_json" && p != "mistral" && p != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "[router] tool_call_parser must be \"auto\", \"hermes\", \"llama3_json\", \"mistral\" "
        "or \"none\", got \"",
        p, "\""));
  }
  return absl::OkStatus();
}

absl::Status ReadOdp(const toml::table& t, OdpConfig* o) {
  TableReader r(t, "[odp]");
  o->enabled = true;
  r.Get("enabled", &o->enabled);
  r.Get("crossover_tokens", &o->crossover_tokens);
  r.Get("slots", &o->slots);
  r.Get("source", &o->source);
  r.Get("image_dir", &o->image_dir);
  return r.Finish();
}

absl::Status CheckOdp(const DeployConfig& c, const DeviceSpec& prefill, const DeviceSpec& decode) {
  const OdpConfig& o = c.odp;
  if (!o.enabled) return absl::OkStatus();
  if (c.prefill.weights.empty()) {
    return absl::InvalidArgumentError(
        "odp streams a prefill checkpoint of its own: set [prefill] weights (e.g. an fp8 or "
        "nvfp4 checkpoint written by dq-quantize)");
  }
  if (!prefill.cuda || !decode.cuda || prefill.index != decode.index) {
    return absl::InvalidArgumentError(absl::StrCat(
        "odp serves both phases from one GPU: set [prefill] and [decode] device to the same "
        "\"cuda:N\" (got \"",
        c.prefill.device, "\" and \"", c.decode.device, "\")"));
  }
  if (o.slots < 2) {
    return absl::InvalidArgumentError("[odp] slots must be >= 2 (one computes, one fills)");
  }
  if (o.source != "disk" && o.source != "host") {
    return absl::InvalidArgumentError(
        absl::StrCat("[odp] source must be \"disk\" or \"host\", got \"", o.source, "\""));
  }
  return absl::OkStatus();
}

// [prefill] attention: FP8 attention goes with FP8 linears (compute = "w8a8"); a GPU runs the
// FP8 kernel, the CPU emulates its numerics.
absl::Status CheckAttention(const PhaseConfig& p) {
  if (p.attention != "bf16" && p.attention != "fp8") {
    return absl::InvalidArgumentError(
        absl::StrCat("[prefill] attention must be \"bf16\" or \"fp8\", got \"", p.attention, "\""));
  }
  if (p.attention == "fp8" && p.compute != "w8a8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "[prefill] attention = \"fp8\" is only for compute = \"w8a8\" (got compute = \"", p.compute,
        "\"); use an fp8 checkpoint with compute = \"w8a8\", or attention = \"bf16\""));
  }
  return absl::OkStatus();
}

absl::Status CheckValues(const DeployConfig& c) {
  if (c.model.empty()) {
    return absl::InvalidArgumentError(
        "\"model\" is required: a .gguf file or a HF checkpoint folder");
  }
  if (c.transfer.backend != "tcp" && c.transfer.backend != "ucx" && c.transfer.backend != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("[transfer] backend must be \"tcp\", \"ucx\" or \"nccl\", got \"",
                     c.transfer.backend, "\""));
  }
  DQ_RETURN_IF_ERROR(CheckPort(c.router.port, "[router] port"));
  DQ_RETURN_IF_ERROR(CheckPort(c.router.grpc_port, "[router] grpc_port", "no gRPC API"));
  DQ_RETURN_IF_ERROR(CheckPort(c.prefill.port, "[prefill] port", "a free port"));
  DQ_RETURN_IF_ERROR(CheckPort(c.decode.port, "[decode] port", "a free port"));
  if (c.router.max_in_flight < 1)
    return absl::InvalidArgumentError("[router] max_in_flight must be >= 1");
  if (c.decode.max_batch < 1) return absl::InvalidArgumentError("[decode] max_batch must be >= 1");
  DQ_RETURN_IF_ERROR(CheckDrafter(c));
  for (const auto& [name, p] : {std::pair{"[prefill] ", &c.prefill}, {"[decode] ", &c.decode}}) {
    if (absl::Status s = ParseCpuMatmul(p->cpu_matmul).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, "cpu_matmul: ", s.message()));
    }
  }
  if (absl::Status s = CheckLmHeadFormat(c.decode.lm_head); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("[decode] ", s.message()));
  }
  if (c.decode.spec_k < 1 || c.decode.spec_k > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("[decode] spec_k must be in [1, 16], got ", c.decode.spec_k));
  }
  if (c.prefill.token_budget < 16) {
    return absl::InvalidArgumentError("[prefill] token_budget must be >= 16");
  }
  absl::StatusOr<DeviceSpec> devices[2] = {ParseDeviceSpec(c.prefill.device),
                                           ParseDeviceSpec(c.decode.device)};
  for (int i = 0; i < 2; ++i) {
    if (!devices[i].ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(i == 0 ? "[prefill] " : "[decode] ", devices[i].status().message()));
    }
  }
  if (devices[0]->cuda != devices[1]->cuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[prefill] device = \"", c.prefill.device, "\" and [decode] device = \"", c.decode.device,
        "\": the CPU keeps KV in f32 and CUDA in bf16, so both workers must be on the CPU or "
        "both on GPUs"));
  }
  if (c.transfer.backend == "nccl" && !devices[0]->cuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[transfer] backend = \"nccl\" moves KV between GPUs, but the workers run on the CPU "
        "([prefill] device = \"",
        c.prefill.device,
        "\"); set [prefill] and [decode] device to "
        "two GPUs (e.g. \"cuda:0\" and \"cuda:1\") or use backend = \"tcp\""));
  }
  if (c.transfer.backend == "nccl" && devices[0]->index == devices[1]->index) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[transfer] backend = \"nccl\" needs the workers on two different GPUs (both are on \"",
        c.prefill.device,
        "\"); NCCL cannot connect a GPU to itself: use e.g. \"cuda:0\" and "
        "\"cuda:1\", or backend = \"tcp\""));
  }
  DQ_RETURN_IF_ERROR(CheckAttention(c.prefill));
  return CheckOdp(c, *devices[0], *devices[1]);
}

}  // namespace

absl::StatusOr<DeployConfig> ParseDeployConfig(std::string_view text, const std::string& base_dir,
                                               std::string_view source_name) {
  toml::table root;
  try {
    root = toml::parse(text, std::string(source_name));
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << std::string(source_name) << ":" << e.source().begin.line << ":"
        << e.source().begin.column << ": " << e.description();
    return absl::InvalidArgumentError(msg.str());
  }
  DeployConfig c;
  TableReader top(root, std::string(source_name));
  top.Get("model", &c.model);
  top.Get("served_model_name", &c.served_model_name);
  if (const toml::node* odp = root.get("odp"); odp != nullptr && !odp->is_table()) {
    top.Get("odp", &c.odp.enabled);
  }
  DQ_RETURN_IF_ERROR(top.Finish());
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (!v.is_table()) continue;
    const toml::table& t = *v.as_table();
    if (key == "router") {
      DQ_RETURN_IF_ERROR(ReadRouter(t, &c.router));
    } else if (key == "transfer") {
      TableReader r(t, "[transfer]");
      r.Get("backend", &c.transfer.backend);
      r.Get("io_timeout_ms", &c.transfer.io_timeout_ms);
      DQ_RETURN_IF_ERROR(r.Finish());
    } else if (key == "prefill" || key == "decode") {
      DQ_RETURN_IF_ERROR(ReadPhase(t, key, key == "prefill" ? &c.prefill : &c.decode));
    } else if (key == "odp") {
      DQ_RETURN_IF_ERROR(ReadOdp(t, &c.odp));
    } else if (key == "prefix_cache") {
      TableReader r(t, "[prefix_cache]");
      r.Get("enabled", &c.prefix_cache.enabled);
      r.Get("assistant_kv", &c.prefix_cache.assistant_kv);
      DQ_RETURN_IF_ERROR(r.Finish());
      const std::string& a = c.prefix_cache.assistant_kv;
      if (!a.empty() && a != "reuse" && a != "reprefill") {
        return absl::InvalidArgumentError(absl::StrCat(
            "[prefix_cache] assistant_kv must be \"reuse\" or \"reprefill\", got \"", a, "\""));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(source_name), ": unknown table [", key,
          "]; expected [router], [transfer], [prefill], [decode], [odp] or [prefix_cache]"));
    }
  }
  c.model = Resolve(base_dir, c.model);
  c.prefill.weights = Resolve(base_dir, c.prefill.weights);
  c.decode.weights = Resolve(base_dir, c.decode.weights);
  c.decode.draft_weights = Resolve(base_dir, c.decode.draft_weights);
  c.odp.image_dir = Resolve(base_dir, c.odp.image_dir);
  DQ_RETURN_IF_ERROR(CheckValues(c));
  return c;
}

absl::StatusOr<DeployConfig> LoadDeployConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the deployment config ", path,
                                            "; see deploy/local.toml for an example"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return ParseDeployConfig(ss.str(), dir.empty() ? "." : dir, path);
}

}  // namespace dq
