#include "kvtransfer/ucx_runtime.h"

#include <dlfcn.h>
#include <ucp/api/ucp.h>

#include "absl/strings/str_cat.h"

namespace dq::kvtransfer {

UcxRuntime LoadedUcx() {
  UcxRuntime r;
  ucp_get_version(&r.major, &r.minor, &r.release);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ucp_get_version), &info) != 0 && info.dli_fname != nullptr) {
    r.library = info.dli_fname;
  }
  return r;
}

absl::Status CheckUcxAbi(const UcxRuntime& r) {
  if (r.major == UCP_API_MAJOR && r.minor >= UCP_API_MINOR) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the loaded ", DescribeUcx(r), " is not compatible: this binary needs UCX ",
                   UCP_API_MAJOR, ".", UCP_API_MINOR, " or a newer ", UCP_API_MAJOR,
                   ".x; point LD_LIBRARY_PATH at a newer UCX (e.g. the libucx-cu13 wheel's, "
                   "bench/pack_ucx_libs.sh) or at the one it was built with"));
}

std::string DescribeUcx(const UcxRuntime& r) {
  return absl::StrCat("UCX ", r.major, ".", r.minor, ".", r.release, " (",
                      r.library.empty() ? "library path unknown" : r.library, "), built against ",
                      UCP_API_MAJOR, ".", UCP_API_MINOR);
}

}  // namespace dq::kvtransfer
