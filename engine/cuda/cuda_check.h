// Error checks for CUDA runtime and cuBLASLt calls. A failed CUDA call on our own launches is a
// bug or a dead device, never bad user input (inputs are validated before any launch), so it
// aborts with the call, file and line; across room boundaries errors stay absl::Status.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(expr)                                                                       \
  do {                                                                                         \
    const cudaError_t dq_cuda_err = (expr);                                                    \
    if (dq_cuda_err != cudaSuccess) {                                                          \
      std::fprintf(stderr, "CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(dq_cuda_err), \
                   cudaGetErrorString(dq_cuda_err), __FILE__, __LINE__, #expr);                \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                           \
    const cublasStatus_t dq_blas_err = (expr);                                                   \
    if (dq_blas_err != CUBLAS_STATUS_SUCCESS) {                                                  \
      std::fprintf(stderr, "cuBLAS error %d (%s) at %s:%d: %s\n", static_cast<int>(dq_blas_err), \
                   cublasLtGetStatusString(dq_blas_err), __FILE__, __LINE__, #expr);             \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

// After a kernel launch: catches bad launch configurations at once (no synchronisation, so it
// is safe inside CUDA graph capture).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
