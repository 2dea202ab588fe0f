// Fixed per-sequence state beside the paged KV: one slot per sequence, of the same size for every
// sequence and constant in its length (the recurrent state of a hybrid model's Gated DeltaNet
// layers: conv inputs and the fp32 delta state). A slot is handed out zeroed, which is the state
// of an empty sequence.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace dq {

class StateSlotPool {
 public:
  // `slot_floats` == 0 or `num_slots` == 0: a pool without slots (a pure-attention model).
  // `host_storage` false: only slot ids are managed here (a device backend holds the bytes).
  StateSlotPool(int64_t slot_floats, int num_slots, bool host_storage = true);

  bool enabled() const { return slot_floats_ > 0 && num_slots_ > 0; }
  int64_t slot_floats() const { return slot_floats_; }
  int num_slots() const { return num_slots_; }
  int num_free() const { return static_cast<int>(free_.size()); }

  bool can_allocate() const { return !free_.empty(); }
  // The lowest free slot, zeroed. Precondition: can_allocate().
  int32_t allocate();
  // Returns `slot` to the pool. Precondition: allocated.
  void release(int32_t slot);
  // Zeroes `slot` (the sequence starts over).
  void clear(int32_t slot);

  float* slot(int32_t s) { return data_.data() + s * slot_floats_; }
  const float* slot(int32_t s) const { return data_.data() + s * slot_floats_; }
  // The raw storage (every slot, slot after slot, slot_bytes() apart), for a transport.
  float* data() { return data_.data(); }
  uint64_t slot_bytes() const { return static_cast<uint64_t>(slot_floats_) * sizeof(float); }
  uint64_t region_bytes() const { return data_.size() * sizeof(float); }

 private:
  int64_t slot_floats_;
  int num_slots_;
  bool host_storage_;
  std::vector<float> data_;
  std::set<int32_t> free_;
  std::vector<bool> used_;
};

}  // namespace dq
