#include "decode_worker/kv_lease_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random_token.h"
#include "common/status.h"

namespace dq {
namespace {

// Ended lease ids kept so late Commit/Release calls get a precise error instead of "unknown".
// Bounded: a lease that ended this long ago is only reported as unknown.
constexpr size_t kMaxEndedRemembered = 4096;

absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

std::vector<BlockRun> ToBlockRuns(const std::vector<int32_t>& blocks) {
  std::vector<BlockRun> runs;
  for (int32_t b : blocks) {
    if (!runs.empty() && runs.back().start + runs.back().count == b) {
      ++runs.back().count;
    } else {
      runs.push_back({b, 1});
    }
  }
  return runs;
}

KvLeaseTable::KvLeaseTable(KvBlockPool& pool, std::function<TimePoint()> clock)
    : pool_(pool), clock_(clock ? std::move(clock) : [] { return Clock::now(); }) {}

bool KvLeaseTable::can_reserve(int tokens) const {
  std::lock_guard lock(mu_);
  return tokens > 0 && pool_.can_allocate(pool_.BlocksFor(tokens)) &&
         (!pool_.has_state_slots() || pool_.state_slots().can_allocate());
}

absl::StatusOr<KvLease> KvLeaseTable::Reserve(std::string_view request_id, int tokens_needed,
                                              std::chrono::milliseconds ttl,
                                              std::span<const int32_t> prompt) {
  if (request_id.empty()) return absl::InvalidArgumentError("Reserve: empty request id");
  if (tokens_needed <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Reserve(", AsAbsl(request_id), "): tokens_needed must be > 0, got ", tokens_needed));
  }
  const TimePoint now = clock_();
  const std::string request(request_id);
  const int need = pool_.BlocksFor(tokens_needed);
  {
    std::vector<KvLease> ended;
    {
      std::lock_guard lock(mu_);
      DQ_RETURN_IF_ERROR(CheckNoLeaseLocked(request));
      // Expired leases may be all that stands in the way; reclaim them before refusing.
      if (!pool_.can_allocate(need) || !SlotFreeLocked()) ReclaimExpiredLocked(now, &ended);
    }
    FreeEnded(ended);
  }
  std::lock_guard lock(mu_);
  DQ_RETURN_IF_ERROR(CheckNoLeaseLocked(request));
  // Cached blocks first: taking them may take them off the evictable list the check counts.
  std::vector<int32_t> cached;
  if (prefix_cache_ && !prompt.empty()) {
    // Full blocks before the prompt's last token: the block holding it is always written by
    // the prefill worker, so every lease has something to receive.
    cached = pool_.AcquirePrefix(prompt.first(prompt.size() - 1));
    if (static_cast<int>(cached.size()) > need) {
      pool_.free(std::span(cached).subspan(need));
      cached.resize(need);
    }
  }
  const int fresh = need - static_cast<int>(cached.size());
  if (!SlotFreeLocked()) {
    pool_.free(cached);
    return absl::ResourceExhaustedError(absl::StrCat(
        "Reserve(", request, "): all ", pool_.state_slots().num_slots(),
        " recurrent state slots are in use (one per sequence of this hybrid model); retry "
        "later, pick another decode worker or restart it with more --state-slots"));
  }
  if (!pool_.can_allocate(fresh)) {
    pool_.free(cached);
    return absl::ResourceExhaustedError(absl::StrCat(
        "Reserve(", request, "): ", tokens_needed, " tokens need ", need, " KV blocks but only ",
        pool_.num_free_blocks(), " are free; retry later or pick another decode worker"));
  }
  Entry entry;
  KvLease& lease = entry.lease;
  // Unguessable: a lease id is what Release and Commit act on, so a peer must not derive
  // another request's from its own.
  lease.lease_id = absl::StrCat("lease-", RandomHex(16));
  lease.request_id = request;
  // The pool hands out the lowest free ids first, which keeps a lease in few runs.
  lease.blocks = std::move(cached);
  lease.cached_tokens = static_cast<int>(lease.blocks.size()) * pool_.block_size();
  const std::vector<int32_t> more = pool_.allocate(fresh);
  lease.blocks.insert(lease.blocks.end(), more.begin(), more.end());
  lease.runs = ToBlockRuns(lease.blocks);
  lease.tokens_reserved = tokens_needed;
  if (pool_.has_state_slots()) lease.state_slot = pool_.state_slots().allocate();
  lease.expires_at = now + ttl;
  blocks_leased_ += need;
  lease_by_request_.emplace(request, lease.lease_id);
  KvLease out = lease;
  leases_.emplace(lease.lease_id, std::move(entry));
  return out;
}

absl::Status KvLeaseTable::CheckNoLeaseLocked(const std::string& request) const {
  if (auto it = lease_by_request_.find(request); it != lease_by_request_.end()) {
    return absl::AlreadyExistsError(absl::StrCat("Reserve: request ", request,
                                                 " already holds lease ", it->second,
                                                 "; release it before reserving again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvSequence> KvLeaseTable::Commit(std::string_view lease_id, int num_tokens) {
  std::vector<KvLease> ended;
  absl::StatusOr<KvSequence> result = CommitOrEnd(lease_id, num_tokens, &ended);
  FreeEnded(ended);
  return result;
}

absl::StatusOr<KvSequence> KvLeaseTable::CommitOrEnd(std::string_view lease_id, int num_tokens,
                                                     std::vector<KvLease>* ended) {
  const TimePoint now = clock_();
  std::lock_guard lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return EndedError(lease_id, "Commit");
  Entry& entry = it->second;
  if (entry.committed) {
    return absl::FailedPreconditionError(
        absl::StrCat("Commit: lease ", AsAbsl(lease_id), " is already committed"));
  }
  if (now >= entry.lease.expires_at) {
    // Past its TTL the prefill's KV can no longer be trusted to be in these blocks (they may be
    // reclaimed at any moment), so the lease is reclaimed here rather than raced.
    EraseLocked(it, Ended::kReclaimed, ended);
    ++reclaimed_total_;
    return EndedError(lease_id, "Commit");
  }
  if (num_tokens <= 0 || num_tokens > entry.lease.tokens_reserved) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Commit: lease ", AsAbsl(lease_id), " reserved ", entry.lease.tokens_reserved,
        " tokens but the commit claims ", num_tokens, "; the prefill wrote a different prompt"));
  }
  entry.committed = true;
  ++committed_;
  return KvSequence{entry.lease.blocks, num_tokens, entry.lease.state_slot};
}

absl::Status KvLeaseTable::Release(std::string_view lease_id) {
  return ReleaseById(lease_id, /*uncommitted_only=*/false);
}

absl::Status KvLeaseTable::ReleaseAndPublish(std::string_view lease_id,
                                             std::span<const int32_t> tokens) {
  std::vector<KvLease> ended;
  absl::Status s;
  {
    std::lock_guard lock(mu_);
    auto it = leases_.find(lease_id);
    if (prefix_cache_ && it != leases_.end() && it->second.committed && !tokens.empty()) {
      const KvLease& l = it->second.lease;
      const int n = std::min<int>(static_cast<int>(tokens.size()),
                                  static_cast<int>(l.blocks.size()) * pool_.block_size());
      pool_.Publish(KvSequence{l.blocks, n}, tokens.first(n));
    }
    s = ReleaseLocked(lease_id, /*uncommitted_only=*/false, &ended);
  }
  FreeEnded(ended);
  return s;
}

absl::Status KvLeaseTable::ReleaseUncommitted(std::string_view lease_id) {
  return ReleaseById(lease_id, /*uncommitted_only=*/true);
}

absl::Status KvLeaseTable::ReleaseRequest(std::string_view request_id) {
  return ReleaseByRequest(request_id, /*uncommitted_only=*/false);
}

absl::Status KvLeaseTable::ReleaseUncommittedRequest(std::string_view request_id) {
  return ReleaseByRequest(request_id, /*uncommitted_only=*/true);
}

absl::Status KvLeaseTable::ReleaseById(std::string_view lease_id, bool uncommitted_only) {
  std::vector<KvLease> ended;
  absl::Status s;
  {
    std::lock_guard lock(mu_);
    s = ReleaseLocked(lease_id, uncommitted_only, &ended);
  }
  FreeEnded(ended);
  return s;
}

absl::Status KvLeaseTable::ReleaseByRequest(std::string_view request_id, bool uncommitted_only) {
  std::vector<KvLease> ended;
  absl::Status s;
  {
    std::lock_guard lock(mu_);
    auto by_request = lease_by_request_.find(std::string(request_id));
    if (by_request == lease_by_request_.end()) {
      return absl::NotFoundError(absl::StrCat("Release: request ", AsAbsl(request_id),
                                              " holds no lease (never reserved, already "
                                              "released, or reclaimed after its TTL)"));
    }
    s = ReleaseLocked(by_request->second, uncommitted_only, &ended);
  }
  FreeEnded(ended);
  return s;
}

absl::Status KvLeaseTable::ReleaseLocked(std::string_view lease_id, bool uncommitted_only,
                                         std::vector<KvLease>* ended) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return EndedError(lease_id, "Release");
  if (uncommitted_only && it->second.committed) {
    return absl::FailedPreconditionError(
        absl::StrCat("Release: lease ", AsAbsl(lease_id),
                     " is committed and decoding; abort the request instead"));
  }
  EraseLocked(it, Ended::kReleased, ended);
  return absl::OkStatus();
}

int KvLeaseTable::ReclaimExpired(TimePoint now) {
  std::vector<KvLease> ended;
  int n = 0;
  {
    std::lock_guard lock(mu_);
    n = ReclaimExpiredLocked(now, &ended);
  }
  FreeEnded(ended);
  return n;
}

int KvLeaseTable::ReclaimExpired() { return ReclaimExpired(clock_()); }

int KvLeaseTable::ReclaimExpiredLocked(TimePoint now, std::vector<KvLease>* ended) {
  int reclaimed = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto next = std::next(it);
    if (!it->second.committed && now >= it->second.lease.expires_at) {
      EraseLocked(it, Ended::kReclaimed, ended);
      ++reclaimed;
    }
    it = next;
  }
  reclaimed_total_ += reclaimed;
  return reclaimed;
}

KvLeaseStats KvLeaseTable::stats() const {
  std::lock_guard lock(mu_);
  KvLeaseStats s;
  s.leases_committed = committed_;
  s.leases_active = static_cast<int>(leases_.size()) - committed_;
  s.blocks_leased = blocks_leased_;
  s.reclaimed_total = reclaimed_total_;
  s.free_blocks = pool_.num_free_blocks();
  s.total_blocks = pool_.options().num_blocks;
  s.prefix = pool_.prefix_stats();
  if (pool_.has_state_slots()) {
    s.free_state_slots = pool_.state_slots().num_free();
    s.total_state_slots = pool_.state_slots().num_slots();
  }
  return s;
}

absl::StatusOr<KvLease> KvLeaseTable::Find(std::string_view lease_id) const {
  std::lock_guard lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return EndedError(lease_id, "Find");
  return it->second.lease;
}

absl::Status KvLeaseTable::EndedError(std::string_view lease_id, std::string_view action) const {
  auto it = ended_.find(std::string(lease_id));
  if (it == ended_.end()) {
    return absl::NotFoundError(absl::StrCat(AsAbsl(action), ": unknown lease ", AsAbsl(lease_id),
                                            " (never issued by this decode worker)"));
  }
  if (it->second == Ended::kReclaimed) {
    return absl::FailedPreconditionError(absl::StrCat(
        AsAbsl(action), ": lease ", AsAbsl(lease_id),
        " expired before it was committed and its blocks were reclaimed; reserve again and "
        "re-run the prefill"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(AsAbsl(action), ": lease ", AsAbsl(lease_id), " was already released"));
}

void KvLeaseTable::RememberEnded(const std::string& lease_id, Ended why) {
  if (ended_order_.size() >= kMaxEndedRemembered) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  ended_[lease_id] = why;
  ended_order_.push_back(lease_id);
}

void KvLeaseTable::EraseLocked(std::map<std::string, Entry, std::less<>>::iterator it, Ended why,
                               std::vector<KvLease>* ended) {
  Entry& entry = it->second;
  if (entry.committed) --committed_;
  lease_by_request_.erase(entry.lease.request_id);
  RememberEnded(it->first, why);
  // The blocks stay leased (not in the pool) until FreeEnded has run the hook.
  ended->push_back(std::move(entry.lease));
  leases_.erase(it);
}

void KvLeaseTable::FreeEnded(std::vector<KvLease>& ended) {
  if (ended.empty()) return;
  if (free_hook_) {
    for (const KvLease& lease : ended) free_hook_(lease);
  }
  std::lock_guard lock(mu_);
  for (const KvLease& lease : ended) {
    pool_.free(lease.blocks);
    if (lease.state_slot >= 0) pool_.state_slots().release(lease.state_slot);
    blocks_leased_ -= static_cast<int>(lease.blocks.size());
  }
  ended.clear();
}

}  // namespace dq
