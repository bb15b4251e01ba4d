// RAM slots for expert records, under the RAM budget: a pinned hot set plus a
// dynamic cache with a replacement policy. Single-threaded (the thread that
// drives the forward pass).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/arena.h"

namespace deltafin::residency {

enum class CachePolicy { Lru, Lfu };
// "lru" | "lfu"; throws Error naming `what` otherwise.
CachePolicy parse_cache_policy(std::string_view s, std::string_view what = "--cache-policy");
const char* cache_policy_name(CachePolicy p);

inline uint64_t expert_key(int layer, int expert) {
  return (static_cast<uint64_t>(layer) << 32) | static_cast<uint32_t>(expert);
}

class ExpertCache {
 public:
  enum class State : uint8_t { Empty, Loading, Ready };

  // `slots` buffers of `slot_bytes`, each aligned to `align`; the pool (if
  // any) faults the memory in (util/arena.h).
  ExpertCache(size_t slots, size_t slot_bytes, size_t align, CachePolicy policy, ThreadPool* pool = nullptr);

  size_t slots() const { return slots_.size(); }
  size_t slot_bytes() const { return slot_bytes_; }
  CachePolicy policy() const { return policy_; }

  // The slot holding or loading `key`, or -1.
  int find(uint64_t key) const;
  // A slot for `key` (state Loading): an empty one, else the policy's victim
  // among Ready slots that are neither pinned nor referenced. -1 if none.
  // REQUIRES: find(key) == -1.
  int claim(uint64_t key);
  // Back to empty (a cancelled or failed load). REQUIRES: not referenced.
  void drop(int slot);
  void set_ready(int slot) { slots_[slot].state = State::Ready; }
  State state(int slot) const { return slots_[slot].state; }
  uint64_t key(int slot) const { return slots_[slot].key; }
  // A use of the slot's expert, for the replacement policy.
  void touch(int slot);
  // Referenced slots (in use by compute or an outstanding read) are never evicted.
  void ref(int slot) { ++slots_[slot].refs; }
  void unref(int slot) { --slots_[slot].refs; }
  // Pinned slots (the hot set) are never evicted.
  void pin(int slot) { slots_[slot].pinned = true; }
  bool pinned(int slot) const { return slots_[slot].pinned; }
  uint8_t* data(int slot) { return base_.data() + static_cast<size_t>(slot) * slot_bytes_; }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Slot {
    uint64_t key = 0;
    State state = State::Empty;
    int refs = 0;
    bool pinned = false;
    uint64_t last_use = 0, uses = 0;
  };
  size_t slot_bytes_;
  CachePolicy policy_;
  Arena base_;  // slots x slot_bytes_, faulted in (util/arena.h)
  std::vector<Slot> slots_;
  std::vector<int> free_;
  std::unordered_map<uint64_t, int> by_key_;
  uint64_t clock_ = 0, evictions_ = 0;
};

}  // namespace deltafin::residency
