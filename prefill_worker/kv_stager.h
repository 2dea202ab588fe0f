// Where the prefill worker's transports read a prompt's KV from, and how it gets there.
//
// In place (CPU backend): the transports read the pool; each layer's fresh blocks are posted
// from the per-layer hook, as the forward pass goes on.
// Direct (a device cache and a device-memory transport, nccl; KvSender::direct): the transport
// reads the cache's blocks. The hook asks the staging to run the posts once the layer's compute
// is done (KvStaging::AfterWritten: an event recorded on the compute stream, waited for on the
// staging's thread), so the engine thread never blocks and the transport never reads a block
// still being written. (The alternative, making the transport's stream wait on the event, would
// need a stream in the Transport interface; the host wait costs microseconds per layer.)
// Staged (a device cache, worker::KvStaging::staged(), for host-memory transports): a
// page-locked arena of `arena_blocks`
// blocks per layer and tensor, registered with the transports once. Each iteration's blocks get
// consecutive arena slots (span after span); the hook copies the layer's blocks from the cache
// into their slots behind the forward pass's queued work, and the layer is posted from the arena
// once that copy is done (on the staging's thread) while the forward pass goes on.
//
// Arena layout: [tensor][layer][slot], each slot one block.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "prefill_worker/kv_senders.h"
#include "prefill_worker/lease_plan.h"
#include "prefill_worker/lease_writer.h"
#include "worker_common/kv_staging.h"

namespace dq::prefill {

class KvStager {
 public:
  // One job's part of an iteration.
  struct Span {
    LeaseWriter* writer = nullptr;
    int first = 0;  // prompt blocks [first, last) hold this iteration's tokens
    int last = 0;
    std::span<const int32_t> cache_blocks;  // the prompt's cache blocks, by prompt block
  };

  // `staging` must outlive the stager. `arena_blocks` (slots per layer and tensor) is used only
  // when the staging is staged and `need_arena` (some transport reads host memory).
  static absl::StatusOr<std::unique_ptr<KvStager>> Create(worker::KvStaging& staging,
                                                          int arena_blocks, bool need_arena = true);
  ~KvStager();
  KvStager(const KvStager&) = delete;
  KvStager& operator=(const KvStager&) = delete;

  // The host memory the host-memory transports register (the pool, or the arena; null keys when
  // neither exists), with its byte layout for LeasePlan's local offsets.
  KvSourceMemory host_source() const;
  // The device cache for direct transports (null keys for a host cache).
  KvSourceMemory device_source() const;
  bool staged() const { return arena_ != nullptr; }
  // Most blocks one iteration may write (the arena's slots); 0: no limit (in place).
  int max_blocks() const { return staged() ? static_cast<int>(arena_geometry_.num_blocks) : 0; }

  // Engine thread. Starts an iteration over `spans` (they and their writers live until End).
  // Precondition: their blocks add up to at most max_blocks() when staged.
  void Begin(std::vector<Span> spans);
  // From ForwardHooks::on_layer_kv_written: ships `layer` of every span (posts it now, or copies
  // it out and posts it once the copy is done). Never blocks on the network or the device.
  void LayerWritten(int layer);
  // After the forward pass: ships the layers whose hook did not run (only when `forward_ok`; a
  // backend may skip hooks, e.g. a replayed CUDA graph), then waits until every layer has been
  // posted or has failed its writer. The transfers themselves are awaited by LeaseWriter::Wait.
  void End(bool forward_ok);

 private:
  KvStager(worker::KvStaging& staging) : staging_(staging) {}
  // Posts `layer` of the direct spans once its compute is done.
  void ShipDirect(int layer);
  // Copies `layer` of the arena spans out, posting them once the copy is done.
  void ShipStaged(int layer);

  worker::KvStaging& staging_;
  KvTensorLayout arena_geometry_;
  std::unique_ptr<worker::HostBuffer> arena_;  // null: in place
  // The iteration in progress: the spans read in place (CPU) or straight from the device
  // cache (direct), and those shipped through the arena with their slots.
  std::vector<Span> in_place_;
  std::vector<Span> direct_;
  std::vector<Span> spans_;                        // through the arena
  std::vector<int32_t> bases_;                     // each arena span's first slot
  std::vector<std::vector<int32_t>> slot_tables_;  // each arena span's local blocks (slots)
  std::vector<bool> shipped_;                      // by layer
};

// Planning, pure (tests). The arena slot of each span's first block: spans take consecutive
// slots in order, one per block of [first, last).
std::vector<int32_t> ArenaBases(std::span<const KvStager::Span> spans);
// A span's local block table for LeaseWriter::PostLayer: prompt block i in [first, last) ->
// arena slot base + i - first (entries below `first` are unused).
std::vector<int32_t> SlotTable(const KvStager::Span& span, int32_t base);
// The copies moving `layer`'s blocks of every span from the cache into the arena (host offsets
// in the arena's [tensor][layer][slot] layout); consecutive cache blocks whose slots are
// consecutive too become one copy.
std::vector<worker::KvCopy> CopyOutPlan(int layer, std::span<const KvStager::Span> spans,
                                        std::span<const int32_t> bases, const KvTensorLayout& cache,
                                        const KvTensorLayout& arena);

}  // namespace dq::prefill
