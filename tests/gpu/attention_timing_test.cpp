// Attention timings on the Qwen3-4B shape (not asserted): prefill at 8K tokens against the
// bf16 tensor-core peak, decode at 8K/32K context against the 4.3 TB/s copy bandwidth. Printed
// and written to $OUT/attention_timing.json (or ./attention_timing.json).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "engine/cuda/attention_decode.h"
#include "engine/cuda/attention_prefill.h"
#include "engine/cuda/attention_prefill_fp8.h"
#include "engine/cuda/device_buffer.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;
constexpr double kPeakTflops = 790.0, kPeakTbps = 4.3;

template <typename F>
double MedianMs(F&& launch, int reps) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  launch();  // warm-up
  std::vector<float> ms(reps);
  for (float& m : ms) {
    CUDA_CHECK(cudaEventRecord(start));
    launch();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  std::sort(ms.begin(), ms.end());
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms[reps / 2];
}

// Cache + contiguous block tables for `seqs` sequences of `ctx` tokens; values are a constant
// bf16 pattern (timing does not depend on them).
struct Cache {
  Cache(int seqs, int ctx) : blocks_per_seq((ctx + kBlock - 1) / kBlock) {
    const int64_t slots = int64_t{seqs} * blocks_per_seq * kBlock;
    k = DeviceBuffer(slots * kKvHeads * kHeadDim * 2);
    v = DeviceBuffer(k.bytes());
    CUDA_CHECK(cudaMemset(k.get(), 0x3c, k.bytes()));
    CUDA_CHECK(cudaMemset(v.get(), 0x3c, v.bytes()));
    std::vector<int32_t> t(int64_t{seqs} * blocks_per_seq);
    std::iota(t.begin(), t.end(), 0);
    tables = DeviceBuffer::From(t);
    layer = {k.get<__nv_bfloat16>(),
             v.get<__nv_bfloat16>(),
             seqs * blocks_per_seq,
             kBlock,
             kKvHeads,
             kHeadDim};
  }
  int blocks_per_seq;
  DeviceBuffer k, v, tables;
  KvCacheLayer layer;
};

// A prefill kernel to time: the FP8 one, or a bf16 variant (KernelOptions::prefill_attention).
struct PrefillKernel {
  const char* name;
  bool fp8;
  PrefillAttentionKernel variant;
};

std::string PrefillTiming(int tokens, const PrefillKernel& kernel) {
  Cache cache(1, tokens);
  DeviceBuffer q(int64_t{tokens} * kHeads * kHeadDim * 2), out(q.bytes());
  CUDA_CHECK(cudaMemset(q.get(), 0x3c, q.bytes()));
  const std::vector<int32_t> cu{0, tokens}, prefix{0};
  DeviceBuffer d_cu = DeviceBuffer::From(cu), d_prefix = DeviceBuffer::From(prefix);
  PrefillAttentionArgs a;
  a.q = q.get<__nv_bfloat16>();
  a.out = out.get<__nv_bfloat16>();
  a.cu_seqlens = d_cu.get<int32_t>();
  a.prefix_lens = d_prefix.get<int32_t>();
  a.block_tables = cache.tables.get<int32_t>();
  a.max_blocks_per_seq = cache.blocks_per_seq;
  a.num_seqs = 1;
  a.num_heads = kHeads;
  a.max_q_len = tokens;
  a.variant = kernel.variant;
  // The FP8 kernel's time includes its quantization of Q, K and V.
  const bool fp8 = kernel.fp8;
  PrefillAttentionFp8Args f;
  std::vector<int32_t> cu_q(2), cu_k(2);
  const std::vector<int32_t> ctx{tokens};
  PlanFp8AttentionTiles(ctx.data(), ctx.data(), 1, cu_q.data(), cu_k.data(), &f);
  DeviceBuffer d_cu_q = DeviceBuffer::From(cu_q), d_cu_k = DeviceBuffer::From(cu_k);
  f.workspace_bytes =
      PrefillAttentionFp8WorkspaceBytes(f.total_q_tiles, f.total_key_tiles, 1, kHeads, kKvHeads);
  DeviceBuffer ws(fp8 ? f.workspace_bytes : 0);
  f.attn = a;
  f.cu_q_tiles = d_cu_q.get<int32_t>();
  f.cu_key_tiles = d_cu_k.get<int32_t>();
  f.workspace = ws.get();
  const double ms = MedianMs(
      [&] {
        if (fp8) {
          PrefillAttentionFp8Forward(f, cache.layer, nullptr);
        } else {
          PrefillAttentionForward(a, cache.layer, nullptr);
        }
      },
      10);
  // Causal: QK^T and PV over T^2 / 2 pairs, 2 flops per multiply-add.
  const double flops = 4.0 * 0.5 * double(tokens) * tokens * kHeadDim * kHeads;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  const double peak = fp8 ? 2 * kPeakTflops : kPeakTflops;
  std::printf("prefill attention qwen3-4b T=%d [%s]: %.3f ms, %.1f TFLOP/s (%.1f%% of %.0f)\n",
              tokens, kernel.name, ms, tflops, 100 * tflops / peak, peak);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"op\": \"prefill_attention\", \"kernel\": \"%s\", \"tokens\": %d, \"ms\": %.4f, "
                "\"tflops\": %.2f, \"peak_tflops\": %.0f}",
                kernel.name, tokens, ms, tflops, peak);
  return buf;
}

std::string DecodeTiming(int seqs, int ctx) {
  Cache cache(seqs, ctx);
  DeviceBuffer q(int64_t{seqs} * kHeads * kHeadDim * 2), out(q.bytes());
  CUDA_CHECK(cudaMemset(q.get(), 0x3c, q.bytes()));
  const std::vector<int32_t> lens(seqs, ctx);
  DeviceBuffer d_lens = DeviceBuffer::From(lens);
  const size_t ws_bytes = DecodeAttentionWorkspaceBytes(seqs, kHeads, kHeadDim, ctx);
  DeviceBuffer ws(ws_bytes);
  DecodeAttentionArgs a;
  a.q = q.get<__nv_bfloat16>();
  a.out = out.get<__nv_bfloat16>();
  a.block_tables = cache.tables.get<int32_t>();
  a.max_blocks_per_seq = cache.blocks_per_seq;
  a.context_lens = d_lens.get<int32_t>();
  a.num_seqs = seqs;
  a.num_heads = kHeads;
  a.max_context = ctx;
  a.workspace = ws.get();
  a.workspace_bytes = ws_bytes;
  const double ms = MedianMs([&] { DecodeAttentionForward(a, cache.layer, nullptr); }, 30);
  const double bytes = 2.0 * seqs * double(ctx) * kKvHeads * kHeadDim * 2;
  const double tbps = bytes / (ms * 1e-3) / 1e12;
  std::printf(
      "decode attention qwen3-4b seqs=%d ctx=%d: %.1f us, %.0f GB/s (%.1f%% of %.1f TB/s)\n", seqs,
      ctx, ms * 1e3, tbps * 1e3, 100 * tbps / kPeakTbps, kPeakTbps);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"op\": \"decode_attention\", \"seqs\": %d, \"context\": %d, \"us\": %.2f, "
                "\"kv_bytes\": %.0f, \"gbps\": %.1f, \"peak_gbps\": %.0f}",
                seqs, ctx, ms * 1e3, bytes, tbps * 1e3, kPeakTbps * 1e3);
  return buf;
}

TEST(GpuAttentionTiming, Qwen3Shape) {
  DQ_REQUIRE_GPU();
  std::vector<std::string> rows;
  // Each prefill kernel in turn (the bf16 variants through PrefillAttentionArgs::variant).
  const PrefillKernel kernels[] = {
      {"fp8", true, PrefillAttentionKernel::kWgmma64},
      {"wg64pp", false, PrefillAttentionKernel::kWgmma64},
      {"wg128pp", false, PrefillAttentionKernel::kWgmma128},
  };
  for (const PrefillKernel& kernel : kernels) {
    rows.push_back(PrefillTiming(32768, kernel));
    rows.push_back(PrefillTiming(8192, kernel));
    rows.push_back(PrefillTiming(2048, kernel));
  }
  for (int seqs : {1, 8}) {
    for (int ctx : {8192, 32768}) rows.push_back(DecodeTiming(seqs, ctx));
  }
  rows.push_back(DecodeTiming(32, 4096));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const char* out_dir = std::getenv("OUT");
  const std::string path = std::string(out_dir ? out_dir : ".") + "/attention_timing.json";
  std::ofstream f(path);
  f << "{\"device\": \"" << prop.name << "\", \"results\": [\n";
  for (size_t i = 0; i < rows.size(); ++i)
    f << "  " << rows[i] << (i + 1 < rows.size() ? ",\n" : "\n");
  f << "]}\n";
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace
}  // namespace dq::cuda
