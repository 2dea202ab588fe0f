#include "worker_common/worker_identity.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker_common/sequence_manifest.h"
#include "worker_common/worker_status.h"

#ifndef DQ_VERSION
#define DQ_VERSION "unknown"
#endif

namespace dq::worker {
namespace v1 = dqserve::v1;

v1::KvLayout KvLayoutOf(const PhaseModel& pm) {
  const ModelConfig& c = pm.runner->config();
  // f32 on the CPU, bf16 on CUDA: a CPU worker and a GPU worker cannot share KV.
  const std::string dtype = pm.kv_staging ? std::string(pm.kv_staging->kv_dtype()) : "f32";
  return PagedKvLayout(c.architecture, c.num_layers, pm.runner->kv_pool().options(), dtype,
                       pm.runner->sequence_state().kv_layer_ids);
}

namespace {
uint64_t PathBytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return fs::file_size(path, ec);
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") {
      total += e.file_size(ec);
    }
  }
  return total;
}
}  // namespace

v1::CheckpointIdentity CheckpointIdentityOf(const PhaseModel& pm) {
  const Model& w = pm.phase_weights();
  v1::CheckpointIdentity id;
  id.set_path(w.path);
  id.set_format(std::string(w.checkpoint->format()));
  id.set_scheme(pm.scheme);
  id.set_size_bytes(PathBytes(w.path));
  return id;
}

v1::WorkerIdentity WorkerIdentityOf(const PhaseModel& pm, const IdentityOptions& o) {
  v1::WorkerIdentity id;
  id.set_role(o.role);
  id.set_address(o.address);
  *id.mutable_kv_layout() = KvLayoutOf(pm);
  *id.mutable_manifest() = ManifestOf(pm);
  *id.mutable_checkpoint() = CheckpointIdentityOf(pm);
  for (const std::string& t : o.transports) id.add_transports(t);
  id.set_version(VersionString());
  return id;
}

std::string KvLayoutMismatch(const v1::KvLayout& e, const v1::KvLayout& a) {
  std::vector<std::string> diffs;
  auto num = [&](const char* field, uint32_t want, uint32_t have) {
    if (want != have) diffs.push_back(absl::StrCat(field, ": expected ", want, ", got ", have));
  };
  auto str = [&](const char* field, const std::string& want, const std::string& have) {
    if (want != have) {
      diffs.push_back(absl::StrCat(field, ": expected \"", want, "\", got \"", have, "\""));
    }
  };
  str("architecture", e.architecture(), a.architecture());
  num("num_layers", e.num_layers(), a.num_layers());
  num("num_kv_heads", e.num_kv_heads(), a.num_kv_heads());
  num("head_dim", e.head_dim(), a.head_dim());
  str("kv_dtype", e.kv_dtype(), a.kv_dtype());
  num("block_size", e.block_size(), a.block_size());
  if (diffs.empty()) return "";
  return absl::StrCat("KV layouts differ (", absl::StrJoin(diffs, "; "),
                      "); prefill and decode workers must serve the same model architecture "
                      "with the same KV dtype and block size (their weights may differ)");
}

v1::HandshakeResponse AnswerHandshake(const v1::WorkerIdentity& self,
                                      const v1::HandshakeRequest& request) {
  v1::HandshakeResponse r;
  *r.mutable_worker() = self;
  const bool check =
      request.has_expected_kv_layout() && !request.expected_kv_layout().architecture().empty();
  std::string mismatch =
      check ? KvLayoutMismatch(request.expected_kv_layout(), self.kv_layout()) : "";
  if (mismatch.empty() && request.expected_manifest().parts_size() > 0) {
    // The KV layouts agree, yet a sequence may own more (a state slot) or other KV layers.
    const absl::Status s =
        CheckManifest(request.expected_manifest(), self.manifest(), "the peer workers");
    if (!s.ok()) {
      mismatch = std::string(s.message());
      r.set_reason(FailureReasonOf(s));
    }
  }
  r.set_kv_layout_compatible(mismatch.empty());
  r.set_mismatch(mismatch);
  return r;
}

std::string VersionString() { return DQ_VERSION; }

}  // namespace dq::worker
