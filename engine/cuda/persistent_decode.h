// The persistent decode step (issue 19): one cooperative launch per decode step in which every
// CTA (one per SM) walks its queue of the host-built schedule (engine/model/decode_schedule.h)
// and runs each task once the global counter of the stage before it is full. The tasks fuse
// what the kernel-per-op path runs as separate kernels: RMSNorm folded into each qkv / gate|up /
// lm_head task (every task recomputes the norm of x into shared memory), QK-norm + RoPE + the
// K/V write, paged decode attention, o and down with the residual add, SwiGLU in gate|up.
//
// Numerics: each task runs the arithmetic of the kernel the reference path launches for it, in
// the same order (the int tile GEMV's split of a tile's chunks over warps and its tree of
// partial sums, the bf16 GEMV's lane order, the norm's block reduction, the decode attention's
// context partitions and merge), so the step's logits equal the kernel-per-op step's bit for
// bit wherever that step runs these kernels (tests/gpu/persistent_decode_test.cpp).
//
// Weights never depend on a counter: before waiting, a task asks L2 for the first part of its
// weight range (cp.async.bulk.prefetch) and fills its shared-memory rings, so a stage's weight
// stream starts while the stage before it finishes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dq::cuda {

// The ring sizes a launch may take, largest first: the largest that fits beside the step's input
// rows and partial sums in shared memory (PersistentDecodeSmemBytes) is used.
inline constexpr int kPdRingBytes[3] = {20480, 12288, 6144};

// One matrix as the persistent kernel reads it.
enum class PdFormat : int32_t { kBf16 = 0, kInt4Tile = 1, kInt2Tile = 2 };
struct PdLinear {
  PdFormat format = PdFormat::kBf16;
  int32_t group_shift = 0;  // int tile: log2(group size)
  // Int tile: warps whose partial sums make one 16-row tile (the reference GEMV's choice for
  // this matrix), and whether they meet as 4 groups of 4 (its cluster kernel) or in order.
  int32_t kw = 1;
  int32_t cluster_tree = 0;
  const uint8_t* data = nullptr;     // bf16 [out, in] rows, or the int tile codes
  const uint32_t* scales = nullptr;  // int tile: (f16 scale | zero << 16) words
  int64_t out = 0, in = 0;
};

// One block of the program: an attention block (qkv = fused q|k|v, o) or an MLP block
// (qkv = fused gate|up, o = down).
struct PdBlock {
  int32_t attention = 0;
  int32_t pad = 0;
  const float* norm = nullptr;
  const float* q_norm = nullptr;  // null: no QK-norm
  const float* k_norm = nullptr;
  PdLinear in_proj;                  // qkv or gate|up
  PdLinear out_proj;                 // o or down
  __nv_bfloat16* k_cache = nullptr;  // attention: this layer's K and V regions
  __nv_bfloat16* v_cache = nullptr;
};

// A task of the schedule as the device reads it (DecodeTask, flattened).
struct PdTask {
  int32_t kind;   // DecodeTaskKind
  int32_t block;  // index into PersistentDecodeParams::blocks (-1: lm_head)
  int32_t begin, end;
  int32_t wait_counter, wait_target, signal_counter;
  int32_t index;  // its place in `tasks` (where a trace records it)
};

struct PersistentDecodeParams {
  // The schedule: worker w runs tasks[queue[queue_begin[w] .. queue_begin[w + 1])].
  const PdTask* tasks = nullptr;
  const int32_t* queue = nullptr;
  const int32_t* queue_begin = nullptr;
  const PdBlock* blocks = nullptr;
  // One counter per stage, zero at launch; the last CTA to finish zeroes them again (and
  // `done`), so a captured step replays without a reset node.
  unsigned* counters = nullptr;
  unsigned* done = nullptr;
  int num_counters = 0;

  int rows = 1;  // tokens of the step (one per sequence), 1..kPdMaxRows
  int hidden = 0, inter = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, vocab = 0;
  float eps = 0.0f;
  int rope_interleaved = 0;
  int rope_in_attention = 0;  // the schedule has no kRopeKv stage (DecodeScheduleOptions)
  // Activations: x fp32 [rows, hidden] (the residual stream, embedded before the launch),
  // qkv bf16 [rows, q_dim + 2 kv_dim], attn bf16 [rows, q_dim], act bf16 [rows, inter],
  // logits fp32 [rows, vocab].
  float* x = nullptr;
  __nv_bfloat16* qkv = nullptr;
  __nv_bfloat16* attn = nullptr;
  __nv_bfloat16* act = nullptr;
  float* logits = nullptr;
  // The step's metadata (CudaDecoderModel's device image).
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* block_tables = nullptr;  // [rows, max_blocks_per_seq]
  const int32_t* context_lens = nullptr;
  int max_blocks_per_seq = 0;
  int block_size = 16;
  const float* inv_freq = nullptr;
  const float* final_norm = nullptr;
  PdLinear lm_head;
  // Decode attention as DecodeAttentionForward cuts it (DecodeAttentionGridSplits), and its
  // partials' workspace in that kernel's layout (out, max, sum; `ws_splits` per head).
  int grid_splits = 1;
  int fixed_partition = 0;
  int ws_splits = 1;
  float* ws = nullptr;
  float attn_scale = 0.0f;
  int attn_groups = 1;  // 4-warp groups that take context partitions side by side (1 or 2)
  int max_jobs = 0;     // partial-sum slots in shared memory (int tile tasks)
  // Bytes of each warp's cp.async ring of weight chunks, one of kPdRingBytes: the weight bytes a
  // CTA keeps in flight, which bound its stream (a GEMV task's rate is about ring / latency).
  int ring_bytes = kPdRingBytes[2];
  // CTAs resident per SM (KernelOptions::persistent_ctas_per_sm): 2 caps registers at 128 a
  // thread and halves the shared memory a CTA may take.
  int ctas_per_sm = 1;
  // Set: each task's start, ready (its wait passed) and end (signalled) as the global timer's
  // nanoseconds, 3 words per task in `tasks` order (CudaDecoderModel::TracePersistentDecode).
  unsigned long long* trace = nullptr;
};

inline constexpr int kPdMaxRows = 8;
inline constexpr int kPdThreads = 256;

// Dynamic shared memory the kernel needs for `p` (rows, widths, attention groups, max_jobs).
size_t PersistentDecodeSmemBytes(const PersistentDecodeParams& p);
// Bytes of dynamic shared memory a CTA may have on this device with `ctas_per_sm` CTAs per SM.
size_t PersistentDecodeSmemLimit(int ctas_per_sm);

// Warps per tile and reduction tree of the reference int tile GEMV (gemv_int_tile.cu RunIntTile)
// for a matrix [out, in] of `bits`, so a task sums in its order.
void PdIntTileSplit(int bits, int64_t out, int64_t in, int ctas_per_sm, bool cluster, int* kw,
                    bool* cluster_tree);

// Whether an int matrix of `bits` with groups of `group` and rows of `in` is in the int tile
// layout (weight_only_kernels.cuh IntTileLayout) the kernel reads.
bool PdIntTileLayout(int bits, int group, int64_t in);

// Enqueues one step: `workers` CTAs (the schedule's; p.ctas_per_sm per SM), cooperative (all
// resident, which the spinning waits need). Capture-safe: no host synchronisation.
void LaunchPersistentDecode(const PersistentDecodeParams& p, int workers, cudaStream_t stream);

}  // namespace dq::cuda
