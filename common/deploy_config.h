// A local deployment described in one TOML file: the model, the router's limits, and per phase
// the weights, compute mode and worker settings (what `dqserve up --config` starts).
//
//   model = "../models/SmolLM2-135M-Instruct.Q4_1.gguf"   # relative paths: to the file's folder
//   [router]   host, port, grpc_port, api_key_env, max_in_flight, max_queue, queue_timeout_ms,
//              request_timeout_ms, max_body_bytes, special_tokens_in_content (trusted callers
//              only: special tokens in chat content are parsed), tool_call_parser ("auto" |
//              "hermes" | "llama3_json" | "mistral" | "none": how tool calls are read from the
//              output; auto: from the chat template)
//   [transfer] backend ("tcp" | "ucx" | "nccl": GPU to GPU, both workers on GPUs), io_timeout_ms
//   [prefill]  weights, compute, device, threads, token_budget, kv_capacity, port, attention
//              ("bf16" | "fp8": FP8 attention for compute = "w8a8"; emulated on the CPU,
//              docs/serving.md)
//   [decode]   weights, compute, device, threads, max_batch, kv_capacity, lease_ttl_ms, port,
//              speculative ("none" | "ngram" | "self" | "dflash"), spec_k (1..16), and for
//              "self": draft_format | draft_weights, draft_group_size; for "dflash" (CPU
//              workers): draft_weights (the DFlash drafter's directory); for both
//              draft_on_prefill (true: the prefill worker holds the drafter too and ships its
//              prompt KV); batch_invariant (GPU decode steps independent of their batch-mates)
//   [prefill] and [decode] cpu_matmul ("q8" | "exact": the CPU backend's decode-step linears,
//              common/cpu_matmul.h)
//   odp = true, or an [odp] table: crossover_tokens, slots, source ("disk" | "host"), image_dir
//              (offloaded disaggregated prefill on one GPU, docs/odp.md)
//   [prefix_cache] enabled (the prefill worker keeps finished prompts' full KV blocks and
//              computes only what a later prompt does not share with them; docs/serving.md),
//              assistant_kv ("reuse" | "reprefill": the decode worker keeps finished requests'
//              KV too, the answer's included or not, and a later prompt that starts with it
//              is not shipped again)
//
// Unknown tables or keys are errors (a typo must not silently fall back to a default).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace dq {

struct RouterConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  int grpc_port = 0;  // 0: no gRPC front end
  // Name of the environment variable holding the API key (keys never live in the file);
  // empty or unset variable: no authentication.
  std::string api_key_env = "DQ_API_KEY";
  int max_in_flight = 4;
  int max_queue = 16;
  int queue_timeout_ms = 30000;
  int request_timeout_ms = 600000;
  int64_t max_body_bytes = 1 << 20;
  // dq-router --special-tokens-in-content: special-token text in chat message content becomes
  // control tokens. Only for trusted callers (they could forge turns); off: it stays text.
  bool special_tokens_in_content = false;
  // dq-router --tool-call-parser: "auto" (the chat template's format), "hermes", "llama3_json",
  // "mistral" or "none" (requests with tools are refused).
  std::string tool_call_parser = "auto";
};

struct TransferConfig {
  std::string backend = "tcp";  // "tcp", "ucx" or "nccl" (both workers on different GPUs)
  int io_timeout_ms = 10000;
};

struct PhaseConfig {
  std::string weights;  // empty: the model's own weights
  std::string compute = "weight_only";
  // "cpu", "cuda" or "cuda:N" (common/device_spec.h): where the worker computes and keeps its
  // KV cache. Both workers must agree on CPU vs GPU (the KV dtype differs).
  std::string device = "cpu";
  int threads = 0;                // 0: all hardware threads
  int kv_capacity = 0;            // tokens; 0: the worker's default
  int port = 0;                   // 0: a free loopback port
  std::string cpu_matmul = "q8";  // --cpu-matmul (common/cpu_matmul.h): "q8" or "exact"
  // prefill only
  int token_budget = 2048;
  std::string attention = "bf16";  // dq-prefill --attention: "bf16" or "fp8"
  // decode only
  int max_batch = 4;
  int lease_ttl_ms = 120000;
  std::string speculative = "none";  // the decode worker's drafter: none, ngram, self, dflash
  int spec_k = 4;                    // most tokens drafted per step
  // The self drafter's weights (exactly one of format and weights; dflash: weights only) and
  // whether the prefill worker computes its prompt KV (else the decode worker does,
  // docs/speculative.md).
  std::string draft_format;
  int draft_group_size = 0;
  std::string draft_weights;
  bool draft_on_prefill = true;
  bool batch_invariant = false;  // dq-decode --batch-invariant
  std::string lm_head = "bf16";  // dq-decode --lm-head (common/lm_head_format.h)
};

// Offloaded disaggregated prefill (docs/odp.md): the decode weights stay resident on the GPU (and
// prefill short prompts); [prefill] weights are streamed layer by layer for long ones. Needs
// [prefill] weights and both phases on the same GPU.
struct OdpConfig {
  bool enabled = false;
  int crossover_tokens = 0;     // prompts from this length stream; 0: measured at start-up
  int slots = 2;                // device slots for streamed layers (>= 2)
  std::string source = "disk";  // "disk": an image file read per pass; "host": pinned memory
  std::string image_dir;        // where the image file goes; empty: the system temp folder
};

// Prefix caching (docs/serving.md, "Prefix caching"). On the prefill worker for now.
struct PrefixCacheConfig {
  bool enabled = false;
  // Set: the decode worker caches too (dq-decode --prefix-cache --assistant-kv), keeping a
  // finished request's prompt KV ("reprefill") or also its answer's ("reuse"); empty: it does
  // not.
  std::string assistant_kv;
};

struct DeployConfig {
  std::string model;
  std::string served_model_name;  // empty: the model file/folder name
  RouterConfig router;
  TransferConfig transfer;
  PhaseConfig prefill;
  PhaseConfig decode;
  OdpConfig odp;
  PrefixCacheConfig prefix_cache;
};

// Parses TOML text; relative paths are resolved against `base_dir` (empty: kept as given).
// Errors say which key is wrong and what is expected.
absl::StatusOr<DeployConfig> ParseDeployConfig(std::string_view toml_text,
                                               const std::string& base_dir = "",
                                               std::string_view source_name = "config");
// Reads and parses a file (paths relative to its folder).
absl::StatusOr<DeployConfig> LoadDeployConfig(const std::string& path);

}  // namespace dq
