// Shared-memory mbarriers and register reallocation for warp-specialized
// kernels (a producer warpgroup feeding consumer warpgroups through a ring of stages).
#pragma once

#include <cstdint>

namespace dq::cuda::mbar {

__device__ __forceinline__ void Init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Release-arrive (orders this thread's earlier writes before the phase completes).
__device__ __forceinline__ void Arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Blocks until the phase with parity `parity` has completed (acquire). A fresh barrier counts
// its phase "before 0" (parity 1) as complete, which lets producers start on empty stages.
__device__ __forceinline__ void Wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Arrives and adds `bytes` to the transaction count the phase waits for (a bulk copy's
// complete_tx pays it back as the bytes land).
__device__ __forceinline__ void ArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// One bulk (TMA engine, no tensor map) copy of `bytes` contiguous global bytes into shared
// memory, completing on `bar`. Addresses 16-aligned, bytes a multiple of 16.
__device__ __forceinline__ void BulkCopy(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Per-warpgroup register budget (every warp of the warpgroup executes it).
template <int N>
__device__ __forceinline__ void RegAlloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void RegDealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace dq::cuda::mbar
