#include "engine/kvcache/state_slot_pool.h"

#include <algorithm>
#include <cassert>

namespace dq {

StateSlotPool::StateSlotPool(int64_t slot_floats, int num_slots, bool host_storage)
    : slot_floats_(std::max<int64_t>(0, slot_floats)),
      num_slots_(slot_floats > 0 ? std::max(0, num_slots) : 0),
      host_storage_(host_storage) {
  if (host_storage_) data_.assign(static_cast<size_t>(slot_floats_) * num_slots_, 0.0f);
  for (int32_t s = 0; s < num_slots_; ++s) free_.insert(free_.end(), s);
  used_.assign(num_slots_, false);
}

int32_t StateSlotPool::allocate() {
  assert(can_allocate());
  const int32_t s = *free_.begin();
  free_.erase(free_.begin());
  used_[s] = true;
  clear(s);
  return s;
}

void StateSlotPool::release(int32_t s) {
  assert(s >= 0 && s < num_slots_ && used_[s] && "state slot released twice or never allocated");
  used_[s] = false;
  free_.insert(s);
}

void StateSlotPool::clear(int32_t s) {
  if (host_storage_) std::fill_n(slot(s), slot_floats_, 0.0f);
}

}  // namespace dq
