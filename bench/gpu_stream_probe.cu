// How fast can CTAs stream weights from HBM, by loading scheme, warps per CTA and bytes in
// flight? The persistent decode kernel (engine/cuda/persistent_decode.cu) runs one CTA of 8 warps
// per SM and streamed ~10 GB/s per SM in its GEMV tasks whatever the format (int4 or bf16), while
// the kernel-per-op GEMVs (2+ CTAs of 16 warps per SM) stream several times that. This probe
// measures the streaming alone (no arithmetic beyond an xor of what arrives) so the decode
// kernel's loading scheme can be chosen from numbers, not guesses (issue 19).
//
// Every warp streams its own contiguous range (as a GEMV job streams its tile's chunks), through
//   cpasync: a ring of `stages` stages of `stage` bytes, 16-byte cp.async per lane;
//   bulk:    a ring of TMA bulk copies (cp.async.bulk) of `stage` bytes, one mbarrier per stage;
//   ldg:     no shared memory: each lane keeps `stages` 16-byte register loads in flight.
//
// Build and run: bash bench/gpu_stream_probe.sh (results: bench/results/gpu_stream_probe_h200.json)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

namespace {

__device__ __forceinline__ uint32_t Smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- cp.async ring: stage = kStage bytes per warp (kStage / 512 16-byte copies per lane) ----
template <int kStages, int kStage>
__global__ void CpAsyncProbe(const uint8_t* src, int64_t warp_bytes, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kPerLane = kStage / 512;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t gw = int64_t{blockIdx.x} * (blockDim.x >> 5) + warp;
  const uint8_t* base = src + gw * warp_bytes;
  uint8_t* ring = smem + int64_t{warp} * kStages * kStage;
  const int64_t n = warp_bytes / kStage;
  int64_t issued = 0;
  auto issue = [&](int st) {
    if (issued < n) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const uint32_t dst = Smem(ring + st * kStage + (k * 32 + lane) * 16);
        const uint8_t* s = base + issued * kStage + (k * 32 + lane) * 16;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(s));
      }
    }
    ++issued;
    asm volatile("cp.async.commit_group;\n");
  };
#pragma unroll
  for (int st = 0; st < kStages; ++st) issue(st);
  uint32_t acc = 0;
  int st = 0;
  for (int64_t i = 0; i < n; ++i) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1) : "memory");
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const uint4 v = *reinterpret_cast<const uint4*>(ring + st * kStage + (k * 32 + lane) * 16);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    issue(st);
    st = st + 1 == kStages ? 0 : st + 1;
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  if (acc == 0x12345678u) sink[0] = acc;
}

// ---- TMA bulk ring: one bulk copy of kStage bytes per stage, issued by lane 0 ----
template <int kStages, int kStage>
__global__ void BulkProbe(const uint8_t* src, int64_t warp_bytes, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  // The rings, then one mbarrier per (warp, stage).
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + int64_t{warps} * kStages * kStage);
  uint8_t* ring = smem + int64_t{warp} * kStages * kStage;
  uint64_t* my = bars + warp * kStages;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(Smem(my + s)));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  const int64_t gw = int64_t{blockIdx.x} * (blockDim.x >> 5) + warp;
  const uint8_t* base = src + gw * warp_bytes;
  const int64_t n = warp_bytes / kStage;
  auto issue = [&](int st, int64_t i) {
    if (lane == 0 && i < n) {
      const uint32_t bar = Smem(my + st);
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "r"(kStage)
                   : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];" ::"r"(Smem(ring + st * kStage)),
          "l"(base + i * kStage), "r"(kStage), "r"(bar)
          : "memory");
    }
  };
  for (int st = 0; st < kStages; ++st) issue(st, st);
  uint32_t acc = 0;
  int st = 0;
  uint32_t phase = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bar = Smem(my + st);
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; "
          "}"
          : "=r"(done)
          : "r"(bar), "r"(phase)
          : "memory");
    }
    for (int off = lane * 16; off < kStage; off += 512) {
      const uint4 v = *reinterpret_cast<const uint4*>(ring + st * kStage + off);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncwarp();  // every lane has read the stage before lane 0 refills it
    issue(st, i + kStages);
    if (++st == kStages) {
      st = 0;
      phase ^= 1;
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// ---- register loads: kDepth 16-byte loads per lane in flight, no shared memory ----
template <int kDepth>
__global__ void LdgProbe(const uint8_t* src, int64_t warp_bytes, uint32_t* sink) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t gw = int64_t{blockIdx.x} * (blockDim.x >> 5) + warp;
  const uint4* base = reinterpret_cast<const uint4*>(src + gw * warp_bytes);
  const int64_t n = warp_bytes / (512 * kDepth);
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint4 v[kDepth];
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      const uint4* p = base + (i * kDepth + k) * 32 + lane;
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
                   : "l"(p));
    }
#pragma unroll
    for (int k = 0; k < kDepth; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

struct Case {
  const char* scheme;
  int stages, stage;  // ldg: stages = loads in flight per lane, stage = 512
  const void* kernel;
  int64_t smem_per_warp;
  int64_t smem_fixed;
};

template <int S, int B>
Case CpAsync() {
  return {"cpasync", S, B, reinterpret_cast<const void*>(&CpAsyncProbe<S, B>), int64_t{S} * B, 0};
}
template <int S, int B>
Case Bulk() {
  return {"bulk", S, B, reinterpret_cast<const void*>(&BulkProbe<S, B>), int64_t{S} * (B + 8), 0};
}
template <int D>
Case Ldg() {
  return {"ldg", D, 512, reinterpret_cast<const void*>(&LdgProbe<D>), 0, 0};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t total = int64_t{1} << 30;  // 1 GiB: far beyond L2
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int smem_max = 0;
  CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  uint8_t* src = nullptr;
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&src, total));
  CHECK(cudaMalloc(&sink, 64));
  CHECK(cudaMemset(src, 1, total));
  const std::vector<Case> cases = {
      CpAsync<4, 512>(),  CpAsync<8, 512>(),  CpAsync<16, 512>(),
      CpAsync<32, 512>(), CpAsync<40, 512>(), CpAsync<2, 2048>(),
      CpAsync<4, 2048>(), CpAsync<8, 2048>(), CpAsync<16, 2048>(),
      Bulk<4, 512>(),     Bulk<16, 512>(),    Bulk<4, 2048>(),
      Bulk<8, 2048>(),    Bulk<2, 8192>(),    Bulk<4, 8192>(),
      Bulk<2, 16384>(),   Ldg<2>(),           Ldg<4>(),
      Ldg<8>(),           Ldg<16>(),
  };
  const int warp_counts[] = {4, 8, 16, 32};
  const int ctas_per_sm[] = {1, 2};
  std::printf("{\"device\": \"%s\", \"sms\": %d, \"bytes_per_launch\": %lld, \"rows\": [\n",
              prop.name, sms, static_cast<long long>(total));
  bool first = true;
  for (const Case& c : cases) {
    for (int warps : warp_counts) {
      for (int per_sm : ctas_per_sm) {
        const int64_t smem = c.smem_fixed + c.smem_per_warp * warps;
        if (smem > smem_max || (per_sm > 1 && smem * per_sm > 228 * 1024 - per_sm * 1024)) continue;
        if (warps * per_sm > 64) continue;
        const int64_t ctas = int64_t{sms} * per_sm;
        const int64_t chunk = int64_t{c.stage} * (c.scheme[0] == 'l' ? c.stages : 1);
        const int64_t warp_bytes = total / (ctas * warps) / chunk * chunk;
        CHECK(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(smem)));
        void* args[] = {&src, const_cast<int64_t*>(&warp_bytes), &sink};
        auto launch = [&] {
          CHECK(cudaLaunchKernel(c.kernel, dim3(static_cast<unsigned>(ctas)), dim3(warps * 32),
                                 args, static_cast<size_t>(smem), nullptr));
        };
        launch();
        CHECK(cudaDeviceSynchronize());
        cudaEvent_t a, b;
        CHECK(cudaEventCreate(&a));
        CHECK(cudaEventCreate(&b));
        constexpr int kReps = 5;
        CHECK(cudaEventRecord(a));
        for (int r = 0; r < kReps; ++r) launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms = 0.0f;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        const double bytes = static_cast<double>(warp_bytes) * ctas * warps;
        const double gbs = bytes * kReps / (ms * 1e-3) / 1e9;
        std::printf(
            "%s  {\"scheme\": \"%s\", \"stages\": %d, \"stage_bytes\": %d, \"warps\": %d, "
            "\"ctas_per_sm\": %d, \"in_flight_per_sm\": %lld, \"gb_s\": %.0f, "
            "\"gb_s_per_sm\": %.1f}",
            first ? "" : ",\n", c.scheme, c.stages, c.stage, warps, per_sm,
            static_cast<long long>(int64_t{c.stages} * c.stage * warps * per_sm), gbs, gbs / sms);
        first = false;
        CHECK(cudaEventDestroy(a));
        CHECK(cudaEventDestroy(b));
      }
    }
  }
  std::printf("\n]}\n");
  (void)argc;
  (void)argv;
  return 0;
}
