#include "residency/expert_cache.h"

#include "util/error.h"

namespace deltafin::residency {

CachePolicy parse_cache_policy(std::string_view s, std::string_view what) {
  if (s == "lru") return CachePolicy::Lru;
  if (s == "lfu") return CachePolicy::Lfu;
  fail("{}: '{}' is not a cache policy (lru or lfu)", what, std::string(s));
}

const char* cache_policy_name(CachePolicy p) { return p == CachePolicy::Lru ? "lru" : "lfu"; }

ExpertCache::ExpertCache(size_t slots, size_t slot_bytes, size_t align, CachePolicy policy, ThreadPool* pool)
    : slot_bytes_((slot_bytes + align - 1) / align * align), policy_(policy), slots_(slots) {
  DF_CHECK(align <= 4096);  // the arena is page aligned
  if (slots > 0) base_ = Arena(slots * slot_bytes_, pool);
  for (size_t i = slots; i-- > 0;) free_.push_back(static_cast<int>(i));
}

int ExpertCache::find(uint64_t key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? -1 : it->second;
}

int ExpertCache::claim(uint64_t key) {
  DF_CHECK(find(key) == -1);
  int s = -1;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    // Victim: least recently used (LRU) or least used, then least recent (LFU).
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& c = slots_[i];
      if (c.state != State::Ready || c.pinned || c.refs > 0) continue;
      if (s < 0) {
        s = static_cast<int>(i);
        continue;
      }
      const Slot& b = slots_[s];
      const bool better = policy_ == CachePolicy::Lru
                              ? c.last_use < b.last_use
                              : (c.uses < b.uses || (c.uses == b.uses && c.last_use < b.last_use));
      if (better) s = static_cast<int>(i);
    }
    if (s < 0) return -1;
    by_key_.erase(slots_[s].key);
    ++evictions_;
  }
  Slot& c = slots_[s];
  c = Slot{};
  c.key = key;
  c.state = State::Loading;
  c.last_use = ++clock_;
  by_key_[key] = s;
  return s;
}

void ExpertCache::drop(int slot) {
  Slot& c = slots_[slot];
  DF_CHECK(c.refs == 0);
  by_key_.erase(c.key);
  c = Slot{};
  free_.push_back(slot);
}

void ExpertCache::touch(int slot) {
  slots_[slot].last_use = ++clock_;
  ++slots_[slot].uses;
}

}  // namespace deltafin::residency
