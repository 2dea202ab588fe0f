// CudaDecoderModel's private parts, shared by its two source files (upload and forward).
#pragma once

#include <utility>
#include <variant>
#include <vector>

#include "engine/cuda/cuda_model.h"

namespace dq::cuda {

// The device image of the model program's blocks (model_program.h), with the CUDA backend's
// fusions applied at upload: q|k|v and gate|up as one matrix where their storage allows.
struct DeviceAttention {
  DeviceBuffer norm, q_norm, k_norm;  // q_norm / k_norm empty: the block has none
  std::vector<DeviceLinear> qkv;      // one fused matrix, or q, k, v
  DeviceLinear o;
  int kv_layer = 0;
};
struct DeviceMlp {
  DeviceBuffer norm;
  std::vector<DeviceLinear> gate_up;  // one fused matrix, or gate, up
  DeviceLinear down;
};
using DeviceBlock = std::variant<DeviceAttention, DeviceMlp>;

struct CudaDecoderModel::Layer {
  std::vector<DeviceBlock> blocks;  // the program layer's blocks, in order
};

// Where one pass's taps (ForwardHooks::tap_layers) land: tapped layer `slot`'s rows at
// out + slot * tokens * hidden, pinned host memory the pass copies into.
struct TapTarget {
  const TapSet* taps = nullptr;
  float* out = nullptr;
};

// What one forward pass needs on the host: the batch flattened into the kernels' inputs.
struct CudaDecoderModel::Plan {
  int64_t tokens = 0;
  int seqs = 0;
  bool decode = false;  // every item has exactly one new token (or row_split)
  // A decode-phase batch of multi-token items (speculative verification) run as one decode
  // row per token: token j of an item attends to its sequence's first n0 + j + 1 positions,
  // through the decode kernels and graphs, with row-invariant linears (LinearArgs), so each
  // row's logits are computed exactly as a one-token decode step computes them.
  bool row_split = false;
  int max_q_len = 0;
  // FP8 prefill attention for this pass (the model's option, and the batch's tiles fit the
  // workspace); the tile totals its kernels are sized by.
  bool fp8_attention = false;
  int fp8_q_tiles = 0, fp8_key_tiles = 0, fp8_max_key_tiles = 0;
  // Rows whose logits are wanted: per item, its first such token and how many.
  std::vector<std::pair<int64_t, int64_t>> logit_rows;
  int64_t num_logit_rows = 0;
  std::vector<int32_t> meta;  // the device metadata image (see Buffers offsets)
};

// Device scratch, sized once for the largest pass; fixed addresses so graphs can replay.
struct CudaDecoderModel::Buffers {
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    if (host_meta) cudaFreeHost(host_meta);
    if (host_logits) cudaFreeHost(host_logits);
    if (host_taps) cudaFreeHost(host_taps);
    if (graph_taps) cudaFreeHost(graph_taps);
  }

  int64_t cap_tokens = 0, cap_seqs = 0, cap_rows = 0;
  int max_blocks = 0;
  // Offsets (in int32s) of each array inside `meta`.
  int64_t ids = 0, positions = 0, slots = 0, cu_seqlens = 0, prefix = 0, tables = 0, ctx = 0;
  int64_t cu_q_tiles = 0, cu_key_tiles = 0;  // FP8 prefill attention's tile offsets
  int64_t meta_ints = 0;
  DeviceBuffer meta, x, h, qkv, attn, gu, rows, rows_h, logits, decode_ws;
  // FP8 prefill attention's workspace (allocated by the first model that runs it) and the
  // tiles it holds; a batch with more runs bf16 attention.
  DeviceBuffer fp8_attn_ws;
  int fp8_q_tile_cap = 0, fp8_key_tile_cap = 0, fp8_seq_cap = 0;
  int32_t* host_meta = nullptr;  // pinned
  float* host_logits = nullptr;  // pinned, [max_graph_batch, vocab]: graphed decode steps' logits
  // Taps (pinned): uncaptured passes' (grown as needed), and graphed passes' at a fixed address
  // ([num_layers, max_graph_batch, hidden], made by the first graph with taps).
  float* host_taps = nullptr;
  int64_t host_taps_floats = 0;
  float* graph_taps = nullptr;
  int32_t* dev(int64_t off) const { return meta.get<int32_t>() + off; }
};

}  // namespace dq::cuda
