// Which UCX this process loaded at run time. The ucx backend is compiled against one UCX's
// headers (Debian's 1.13 here) and may run on another's libraries (the libucx-cu13 wheel's 1.22,
// which has the CUDA transports; kvtransfer/README.md, "UCX with CUDA"). UCX keeps its API
// backward compatible within a major version, so a newer library serves an older build; an older
// one may lack what the build calls, so the transport refuses it with this check's error.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace dq::kvtransfer {

struct UcxRuntime {
  unsigned major = 0, minor = 0, release = 0;  // ucp_get_version()
  std::string library;  // the file libucp was loaded from; empty if the loader cannot say
};

// The loaded libucp (UCX must be linked in: only ucx_*.cpp call this).
UcxRuntime LoadedUcx();

// OK when the loaded UCX has the major version this binary was compiled against and at least its
// minor version; FailedPrecondition saying both versions and what to do otherwise.
absl::Status CheckUcxAbi(const UcxRuntime& runtime);

// "UCX 1.22.0 (/opt/ucx/lib/libucp.so.0), built against 1.13".
std::string DescribeUcx(const UcxRuntime& runtime);

}  // namespace dq::kvtransfer
