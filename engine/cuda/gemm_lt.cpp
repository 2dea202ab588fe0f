#include "engine/cuda/gemm_lt.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/cuda/cuda_check.h"

namespace dq::cuda {
namespace {

// The largest power of two (<= 256) dividing the address: what the heuristic may assume.
int AlignmentOf(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

int Log2(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

template <typename T>
void SetDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
}

template <typename T>
void SetPref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
             const T& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof(value)));
}

void CheckArgs(const GemmArgs& a) {
  const bool one_output = (a.y_bf16 != nullptr) != (a.y_f32 != nullptr);
  const bool scales_paired = (a.x_scale == nullptr) == (a.w_scale == nullptr);
  const bool scales_ok = a.x_scale == nullptr || a.input == GemmInput::kE4M3;
  const bool fp4 = a.input == GemmInput::kE2M1;
  const bool block_ok = fp4 ? (a.x_block_scale != nullptr && a.w_block_scale != nullptr &&
                               a.x_scale == nullptr && a.k % 16 == 0)
                            : (a.x_block_scale == nullptr && a.w_block_scale == nullptr);
  const bool acc_ok = !a.accumulate || a.y_f32 != nullptr;
  if (a.m < 1 || a.n < 1 || a.k < 1 || a.x == nullptr || a.w == nullptr || !one_output ||
      !scales_paired || !scales_ok || !acc_ok || !block_ok) {
    std::fprintf(stderr, "GemmLt: bad arguments (m %lld, n %lld, k %lld)\n",
                 static_cast<long long>(a.m), static_cast<long long>(a.n),
                 static_cast<long long>(a.k));
    std::abort();
  }
}

// VEC16_UE4M3 block scaling for both operands (W is cuBLASLt's A). A cuBLASLt that rejects
// the attributes makes the plan unsupported instead of aborting.
bool DescribeBlockScales(cublasLtMatmulDesc_t d, const GemmArgs& args) {
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
  const void* a_scale = args.w_block_scale;
  const void* b_scale = args.x_block_scale;
  return cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                        sizeof a_scale) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                        sizeof b_scale) == CUBLAS_STATUS_SUCCESS;
}

cudaDataType_t InputType(GemmInput input) {
  switch (input) {
    case GemmInput::kE4M3:
      return CUDA_R_8F_E4M3;
    case GemmInput::kE2M1:
      return CUDA_R_4F_E2M1;
    case GemmInput::kBf16:
      break;
  }
  return CUDA_R_16BF;
}

const char* InputName(GemmInput input) {
  switch (input) {
    case GemmInput::kE4M3:
      return "E4M3";
    case GemmInput::kE2M1:
      return "E2M1 (block-scaled)";
    case GemmInput::kBf16:
      break;
  }
  return "bf16";
}

}  // namespace

struct GemmLt::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

GemmLt::GemmLt() : workspace_(kWorkspaceBytes) { CUBLAS_CHECK(cublasLtCreate(&handle_)); }

GemmLt::~GemmLt() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

GemmLt::Plan& GemmLt::GetPlan(const GemmArgs& args) {
  CheckArgs(args);
  void* y = args.y_bf16 != nullptr ? static_cast<void*>(args.y_bf16) : args.y_f32;
  const int align_x = AlignmentOf(args.x), align_w = AlignmentOf(args.w);
  const int align_y = AlignmentOf(y);
  const int scaled = args.x_scale != nullptr ? 1 : 0;
  const Key key{static_cast<int>(args.input),
                args.y_f32 != nullptr ? 1 : 0,
                args.accumulate ? 1 : 0,
                scaled,
                args.m,
                args.n,
                args.k,
                Log2(align_x) | (Log2(align_w) << 4) | (Log2(align_y) << 8)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  const cudaDataType_t in_type = InputType(args.input);
  const cudaDataType_t out_type = args.y_f32 != nullptr ? CUDA_R_32F : CUDA_R_16BF;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (scaled) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
    SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            static_cast<const void*>(args.w_scale));
    SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            static_cast<const void*>(args.x_scale));
  }
  if (args.input == GemmInput::kE2M1 && !DescribeBlockScales(plan->desc, args)) {
    return *plans_.emplace(key, std::move(plan)).first->second;  // not ok: unsupported here
  }
  // Column-major view (sizes and leading dimensions in elements, FP4 included): A = W as [k, n] (ld
  // k), B = X as [k, m] (ld k), C = D = Y as [n, m].
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in_type, args.k, args.n, args.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in_type, args.k, args.m, args.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, out_type, args.n, args.m, args.n));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  SetPref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(align_w));
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(align_x));
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(align_y));
  SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(align_y));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  plan->ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->ok) plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

bool GemmLt::Supported(const GemmArgs& args) { return GetPlan(args).ok; }

void GemmLt::Run(const GemmArgs& args, cudaStream_t stream) {
  Plan& plan = GetPlan(args);
  if (!plan.ok) {
    std::fprintf(stderr,
                 "GemmLt: cuBLASLt has no algorithm for %s m %lld n %lld k %lld (scaled %d, "
                 "%s output)\n",
                 InputName(args.input), static_cast<long long>(args.m),
                 static_cast<long long>(args.n), static_cast<long long>(args.k),
                 args.x_scale != nullptr ? 1 : 0, args.y_f32 != nullptr ? "fp32" : "bf16");
    std::abort();
  }
  if (args.x_scale != nullptr) {
    // W is cuBLASLt's A (rows of D = output channels), X its B (columns of D = tokens).
    SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            static_cast<const void*>(args.w_scale));
    SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            static_cast<const void*>(args.x_scale));
  }
  if (args.input == GemmInput::kE2M1) {
    SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            static_cast<const void*>(args.w_block_scale));
    SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            static_cast<const void*>(args.x_block_scale));
  }
  void* y = args.y_bf16 != nullptr ? static_cast<void*>(args.y_bf16) : args.y_f32;
  const float beta = args.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &args.alpha, args.w, plan.a, args.x, plan.b,
                              &beta, y, plan.c, y, plan.c, &plan.algo, workspace_.get(),
                              kWorkspaceBytes, stream));
}

}  // namespace dq::cuda
