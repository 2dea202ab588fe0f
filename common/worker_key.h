// The deployment's worker credential: with one set, every worker RPC must carry
// "authorization: Bearer <key>" (the workers check it, the router sends it on every call). It
// travels in the environment (DQ_WORKER_KEY), never on a command line that `ps` shows;
// `dqserve up` makes a fresh one per deployment, compose and Kubernetes take it from a secret.
#pragma once

#include <string>
#include <string_view>

namespace dq {

inline constexpr char kWorkerKeyEnv[] = "DQ_WORKER_KEY";

// The key in DQ_WORKER_KEY, or "" (workers then accept any caller: loopback or a network policy
// is all that guards them).
std::string WorkerKeyFromEnv();

// Whether `authorization` is "Bearer <key>", compared in constant time.
bool IsWorkerBearer(std::string_view authorization, std::string_view key);

}  // namespace dq
