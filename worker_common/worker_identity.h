// Who a worker is on the wire: its KV layout (must match between prefill and decode) and its
// checkpoint identity (may differ; logged and exported), and the layout check both sides run.
#pragma once

#include <string>
#include <vector>

#include "dqserve/v1/worker.pb.h"
#include "worker_common/phase_model.h"

namespace dq::worker {

// The layout of the phase's KV cache: architecture, layers, KV heads, head dim, dtype ("f32" on
// the CPU, "bf16" on CUDA), block size.
dqserve::v1::KvLayout KvLayoutOf(const PhaseModel& pm);

// Path, container format, scheme and total weight-file size of the phase's weights.
dqserve::v1::CheckpointIdentity CheckpointIdentityOf(const PhaseModel& pm);

struct IdentityOptions {
  std::string role;     // "prefill" or "decode"
  std::string address;  // host:port of the worker's gRPC server
  std::vector<std::string> transports;
};
dqserve::v1::WorkerIdentity WorkerIdentityOf(const PhaseModel& pm, const IdentityOptions& o);

// Empty when the layouts agree; otherwise one clause per differing field with both values,
// e.g. "num_kv_heads: expected 3, this worker has 4", and what to do.
std::string KvLayoutMismatch(const dqserve::v1::KvLayout& expected,
                             const dqserve::v1::KvLayout& actual);

// The HandshakeResponse a worker returns (an empty expected layout is always compatible).
dqserve::v1::HandshakeResponse AnswerHandshake(const dqserve::v1::WorkerIdentity& self,
                                               const dqserve::v1::HandshakeRequest& request);

// "dqserve <git describe>" as built.
std::string VersionString();

}  // namespace dq::worker
