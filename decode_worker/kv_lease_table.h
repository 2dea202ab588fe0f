// The decode worker's record of KV blocks reserved for requests whose prefill runs elsewhere.
//
// The router reserves blocks here (Reserve), a prefill worker writes its KV straight into them,
// and the router then commits the lease (Commit) so decoding can start. A lease that is never
// committed must not leak blocks when the prefill worker dies or the router forgets it, hence
// the TTL and ReclaimExpired.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kvcache/kv_block_pool.h"

namespace dq {

// Consecutive block ids [start, start + count): one contiguous region per layer, so one
// transfer per run per layer (mirrors proto BlockRun).
struct BlockRun {
  int32_t start = 0;
  int32_t count = 0;
  bool operator==(const BlockRun&) const = default;
};

// Splits a block list (in token order) into maximal runs of consecutive ids.
std::vector<BlockRun> ToBlockRuns(const std::vector<int32_t>& blocks);

struct KvLease {
  using TimePoint = std::chrono::steady_clock::time_point;
  std::string lease_id;
  std::string request_id;
  std::vector<int32_t> blocks;  // token order
  std::vector<BlockRun> runs;   // `blocks` as runs, same order
  int tokens_reserved = 0;
  // Leading tokens whose KV the first blocks already hold (the prefix cache; whole blocks):
  // the prefill worker writes only the blocks after them.
  int cached_tokens = 0;
  // A hybrid model's state slot (the pool's state slots; -1: none), zeroed at Reserve; the
  // prefill worker writes the prompt's recurrent state into it. Freed with the blocks.
  int32_t state_slot = -1;
  TimePoint expires_at;
};

struct KvLeaseStats {
  int leases_active = 0;        // reserved, not yet committed
  int leases_committed = 0;     // committed, not yet released
  int blocks_leased = 0;        // held by active + committed leases
  int64_t reclaimed_total = 0;  // leases reclaimed by TTL since construction
  int free_blocks = 0;          // free in the pool
  int total_blocks = 0;         // the pool's size
  PrefixCacheStats prefix;      // the prefix cache's counters (zero while it is off)
  int free_state_slots = 0;     // a hybrid model's state slots: free now / in all (0 / 0: none)
  int total_state_slots = 0;
};

// Thread-safe. The table is the only user of `pool` while it exists (the pool itself is not
// thread-safe), and it owns the blocks of every lease until Release.
class KvLeaseTable {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  // `clock` is injectable so TTL tests need no sleeping; defaults to steady_clock::now.
  explicit KvLeaseTable(KvBlockPool& pool, std::function<TimePoint()> clock = nullptr);
  KvLeaseTable(const KvLeaseTable&) = delete;
  KvLeaseTable& operator=(const KvLeaseTable&) = delete;

  // Called with each lease after it left the table and before its blocks go back to the pool
  // (Release, TTL reclaim, expiry found at Commit or Reserve), on the thread that ended it and
  // without the table's lock, so it may block (a tcp region release waits for a copy in
  // flight). The decode worker releases the lease's transfer regions here, so a late write can
  // never land in blocks another request owns. Set before the first Reserve.
  using FreeHook = std::function<void(const KvLease&)>;
  void set_free_hook(FreeHook hook) { free_hook_ = std::move(hook); }

  // Prefix caching (off by default; set before the first Reserve): Reserve leases the cached
  // leading full blocks of the prompt it is given, and ReleaseAndPublish keeps a finished
  // sequence's full blocks for later prompts (KvBlockPool's prefix cache).
  void set_prefix_cache(bool on) { prefix_cache_ = on; }
  bool prefix_cache() const { return prefix_cache_; }

  // Pure check: would Reserve(tokens) find enough free blocks (and a state slot) right now?
  bool can_reserve(int tokens) const;

  // Reserves the blocks for `tokens_needed` tokens, held until Commit + Release, or until `ttl`
  // passes without a Commit. With the prefix cache on, the lease starts with the cached leading
  // full blocks of `prompt` (KvLease::cached_tokens). A pool with state slots gives the lease
  // one (KvLease::state_slot). Errors: InvalidArgument (tokens <= 0, empty request id),
  // AlreadyExists (request id already holds a lease), ResourceExhausted (not enough blocks, or
  // no free state slot).
  absl::StatusOr<KvLease> Reserve(std::string_view request_id, int tokens_needed,
                                  std::chrono::milliseconds ttl,
                                  std::span<const int32_t> prompt = {});

  // The prefill finished writing `num_tokens` tokens of KV. The lease stops being subject to its
  // TTL; the returned sequence is the block table (and state slot) to decode from (the table
  // still owns both). Errors: NotFound (unknown lease), FailedPrecondition (expired and reclaimed,
  // released, or already committed), InvalidArgument (num_tokens beyond the reservation).
  absl::StatusOr<KvSequence> Commit(std::string_view lease_id, int num_tokens);

  // Frees a lease's blocks (finish, cancellation, failure), committed or not. A second release
  // of the same lease is an error status, never a double free.
  absl::Status Release(std::string_view lease_id);
  absl::Status ReleaseRequest(std::string_view request_id);
  // Release of a committed lease whose first blocks hold the KV of `tokens` (from position 0):
  // with the prefix cache on, their full blocks stay cached for later prompts first. The
  // caller vouches for the KV (the decode engine, which wrote or received it).
  absl::Status ReleaseAndPublish(std::string_view lease_id, std::span<const int32_t> tokens);
  // Same, but only while the lease is uncommitted (FailedPrecondition once committed): for
  // callers that must not pull blocks from under a request that is decoding (the Release and
  // Abort RPCs; a committed lease belongs to the decode engine until it finishes).
  absl::Status ReleaseUncommitted(std::string_view lease_id);
  absl::Status ReleaseUncommittedRequest(std::string_view request_id);

  // Frees every uncommitted lease whose TTL has passed at `now`; returns how many.
  int ReclaimExpired(TimePoint now);
  // Same, at the injected clock's now.
  int ReclaimExpired();

  KvLeaseStats stats() const;
  // The live lease named `lease_id` (diagnostics, Decode lookups).
  absl::StatusOr<KvLease> Find(std::string_view lease_id) const;

 private:
  struct Entry {
    KvLease lease;
    bool committed = false;
  };
  // Why a lease id is no longer live; remembered so errors can say what happened to it.
  enum class Ended { kReleased, kReclaimed };

  absl::Status EndedError(std::string_view lease_id, std::string_view action) const;
  void RememberEnded(const std::string& lease_id, Ended why);
  // Forgets the entry and moves its lease to `ended`; its blocks stay counted as leased until
  // FreeEnded. Caller holds mu_.
  void EraseLocked(std::map<std::string, Entry, std::less<>>::iterator it, Ended why,
                   std::vector<KvLease>* ended);
  // Runs the free hook on each ended lease (without mu_), then returns their blocks.
  void FreeEnded(std::vector<KvLease>& ended);
  int ReclaimExpiredLocked(TimePoint now, std::vector<KvLease>* ended);
  // The public Release* calls: lock, release, then free the ended leases' blocks unlocked.
  absl::Status ReleaseById(std::string_view lease_id, bool uncommitted_only);
  absl::Status ReleaseByRequest(std::string_view request_id, bool uncommitted_only);
  // Releases the live lease `lease_id`, refusing a committed one when `uncommitted_only`.
  absl::Status ReleaseLocked(std::string_view lease_id, bool uncommitted_only,
                             std::vector<KvLease>* ended);
  absl::Status CheckNoLeaseLocked(const std::string& request) const;
  // Whether a lease can get a state slot now (always, for a pool without them). Caller holds mu_.
  bool SlotFreeLocked() const {
    return !pool_.has_state_slots() || pool_.state_slots().can_allocate();
  }
  absl::StatusOr<KvSequence> CommitOrEnd(std::string_view lease_id, int num_tokens,
                                         std::vector<KvLease>* ended);

  KvBlockPool& pool_;
  bool prefix_cache_ = false;
  std::function<TimePoint()> clock_;
  FreeHook free_hook_;

  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> leases_;  // by lease id
  std::unordered_map<std::string, std::string> lease_by_request_;
  std::unordered_map<std::string, Ended> ended_;
  std::deque<std::string> ended_order_;  // bounds ended_ (oldest first)
  int committed_ = 0;
  int blocks_leased_ = 0;
  int64_t reclaimed_total_ = 0;
};

}  // namespace dq
