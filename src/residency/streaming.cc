#include "residency/streaming.h"

#include <algorithm>

#include "format/checkpoint.h"
#include "util/error.h"
#include "util/timer.h"

namespace deltafin::residency {

StreamingExperts::StreamingExperts(store::ExpertStore& store, ExpertCache& cache, int layers, int experts,
                                   HeatHistogram* heat)
    : store_(store), cache_(cache), layers_(layers), experts_(experts), heat_(heat) {
  stats_.pilot.resize(layers);
}

StreamingExperts::~StreamingExperts() {
  // Drain reads still in flight: their destinations are cache slots.
  try {
    while (store_.outstanding() > 0) {
      done_.clear();
      store_.wait(done_, 1);
    }
  } catch (...) {
  }
}

void StreamingExperts::issue(int layer, int expert, int slot, bool urgent) {
  const uint64_t key = expert_key(layer, expert);
  store_.request(layer, expert, cache_.data(slot), key, urgent);
  loading_[key] = slot;
}

size_t StreamingExperts::preload_pinned(const std::vector<std::pair<int, int>>& hot) {
  size_t n = 0;
  for (auto [l, e] : hot) {
    const uint64_t key = expert_key(l, e);
    if (cache_.find(key) >= 0) continue;
    int slot = cache_.claim(key);
    if (slot < 0) break;
    cache_.pin(slot);
    issue(l, e, slot, true);
    ++n;
    ++pinned_;
  }
  while (!loading_.empty()) pump(true);
  stats_.records_read = 0;
  stats_.bytes_read = 0;
  stats_.read_latency_sum_s = 0;
  return n;
}

void StreamingExperts::begin_layer(int layer, std::span<const int32_t> experts) {
  DF_CHECK(want_.empty() && ready_.empty() && deferred_.empty() && in_use_.empty());
  DF_CHECK(layer >= 0 && layer < layers_);
  layer_ = layer;
  // Pilot accounting: every pick, read or not, by its rank.
  auto h = hints_.find(layer);
  std::vector<int32_t>& wrong = wrong_;
  wrong.clear();
  if (h != hints_.end()) {
    PilotLayerStats& ps = stats_.pilot[layer];
    ps.hinted += h->second.size();
    ps.needed += experts.size();
    for (size_t k = 0; k < h->second.size(); ++k) {
      const bool right = std::binary_search(experts.begin(), experts.end(), h->second[k]);
      const size_t r = std::min<size_t>(k, PilotLayerStats::kRanks - 1);
      ++ps.rank_hinted[r];
      ps.rank_correct[r] += right;
      ps.correct += right;
      if (!right) wrong.push_back(h->second[k]);
    }
    hints_.erase(h);
  }
  // What is in RAM (pinned, cached, or prefetched and held) is referenced
  // first, so that no miss below can evict it.
  std::vector<std::pair<int32_t, bool>>& misses = misses_;  // expert, was prefetched
  misses.clear();
  for (int32_t e : experts) {
    if (heat_) heat_->add(layer, e);
    const uint64_t key = expert_key(layer, e);
    want_.insert(e);
    const int slot = cache_.find(key);
    const bool was_prefetched = prefetched_.erase(key) > 0;
    if (slot < 0) {
      misses.emplace_back(e, was_prefetched);
      continue;
    }
    cache_.ref(slot);
    if (cache_.pinned(slot)) ++stats_.hits_pinned;
    else if (was_prefetched) ++stats_.hits_prefetched;
    else ++stats_.hits_cached;
    if (cache_.state(slot) == ExpertCache::State::Ready) ready_.push_back(e);
    else store_.promote(key);  // a prefetch still loading: now a demand read; pump() hands it out
  }
  // This layer's prefetches are no longer held: the wanted ones are
  // referenced above, the others become ordinary cache entries, and wrong
  // guesses whose reads have not started are cancelled.
  for (auto it = held_.begin(); it != held_.end();) {
    if (static_cast<int>(it->first >> 32) == layer) {
      cache_.unref(it->second);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  for (int32_t e : wrong) {
    const uint64_t key = expert_key(layer, e);
    auto it = loading_.find(key);
    if (it != loading_.end() && store_.cancel(key)) {
      cache_.drop(it->second);
      loading_.erase(it);
      prefetched_.erase(key);
      ++stats_.prefetch_cancelled;
    }
  }
  for (auto [e, was_prefetched] : misses) {
    ++stats_.misses;
    if (was_prefetched) ++stats_.prefetch_evicted;
    const int slot = cache_.claim(expert_key(layer, e));
    if (slot < 0) {
      deferred_.push_back(e);
      continue;
    }
    cache_.ref(slot);
    issue(layer, e, slot, true);
  }
}

void StreamingExperts::issue_deferred() {
  while (!deferred_.empty()) {
    const int32_t e = deferred_.front();
    int slot = cache_.claim(expert_key(layer_, e));
    if (slot < 0) return;
    deferred_.pop_front();
    cache_.ref(slot);
    issue(layer_, e, slot, true);
  }
}

void StreamingExperts::pump(bool block) {
  done_.clear();
  if (block) store_.wait(done_, 1);
  else store_.poll(done_);
  for (const auto& c : done_) {
    auto it = loading_.find(c.tag);
    DF_CHECK(it != loading_.end());
    const int slot = it->second;
    loading_.erase(it);
    cache_.set_ready(slot);
    ++stats_.records_read;
    stats_.bytes_read += c.record->length;
    stats_.read_latency_sum_s += c.latency_s;
    const int layer = static_cast<int>(c.tag >> 32);
    const int32_t e = static_cast<int32_t>(c.tag & 0xffffffffu);
    if (layer == layer_ && want_.count(e) && !in_use_.count(e) &&
        std::find(ready_.begin(), ready_.end(), e) == ready_.end())
      ready_.push_back(e);
  }
}

int32_t StreamingExperts::next(ExpertWeights* out) {
  DF_CHECK(!want_.empty());
  while (ready_.empty()) {
    issue_deferred();
    if (loading_.empty()) fail("expert cache deadlock: no slot free for layer {}; raise --ram-budget", layer_);
    Stopwatch sw;
    pump(true);
    stats_.io_wait_s += sw.seconds();
  }
  const int32_t e = ready_.front();
  ready_.pop_front();
  want_.erase(e);
  const int slot = cache_.find(expert_key(layer_, e));
  DF_CHECK(slot >= 0);
  cache_.touch(slot);
  in_use_[e] = slot;
  ++stats_.expert_uses;
  const store::Record* rec = store_.manifest().find(layer_, e);
  DF_CHECK(rec != nullptr);
  *out = views(slot, *rec);
  return e;
}

void StreamingExperts::release(int32_t expert) {
  auto it = in_use_.find(expert);
  DF_CHECK(it != in_use_.end());
  cache_.unref(it->second);
  in_use_.erase(it);
  issue_deferred();
  pump(false);
}

void StreamingExperts::prefetch_hint(int layer, std::span<const int32_t> experts) {
  if (!pilot_on_ || layer < 0 || layer >= layers_) return;
  PilotLayerStats& ps = stats_.pilot[layer];
  if (!ps.off && ps.hinted >= pilot_warmup_ && ps.precision() < pilot_min_precision_) ps.off = true;
  if (ps.off) {
    ps.skipped += experts.size();
    return;
  }
  // The leading ranks that have shown they pay. Learning costs no reads:
  // every pick is checked against the layer's experts, read or not.
  ps.ranks_read = 0;
  while (ps.ranks_read < PilotLayerStats::kRanks) {
    const size_t r = static_cast<size_t>(ps.ranks_read);
    if (ps.rank_hinted[r] < rank_warmup_ ||
        static_cast<double>(ps.rank_correct[r]) < rank_min_precision_ * static_cast<double>(ps.rank_hinted[r]))
      break;
    ++ps.ranks_read;
  }
  auto& h = hints_[layer];
  const size_t max_held = (cache_.slots() - pinned_) / 2;
  size_t reads = 0;
  for (size_t k = 0; k < experts.size(); ++k) {
    const int32_t e = experts[k];
    if (std::find(h.begin(), h.end(), e) != h.end()) continue;
    h.push_back(e);
    const uint64_t key = expert_key(layer, e);
    if (cache_.find(key) >= 0) continue;
    if (pilot_reads_ > 0 && reads >= pilot_reads_) continue;
    if (static_cast<int>(std::min<size_t>(k, PilotLayerStats::kRanks - 1)) >= ps.ranks_read) continue;
    if (held_.size() >= max_held) continue;  // no room to hold more: the miss path reads it later
    int slot = cache_.claim(key);
    if (slot < 0) continue;
    cache_.ref(slot);
    held_[key] = slot;
    issue(layer, e, slot, false);  // behind every demand read of the drive
    ++reads;
    prefetched_.insert(key);
    ++stats_.prefetch_issued;
  }
}

ExpertWeights StreamingExperts::views(int slot, const store::Record& rec) {
  const store::RecordLayout& lay = store_.manifest().layouts.at(rec.layout);
  std::vector<TensorView> tv(lay.tensors.size());
  const uint8_t* base = cache_.data(slot);
  for (size_t i = 0; i < lay.tensors.size(); ++i) {
    const auto& s = lay.tensors[i];
    tv[i].name = s.name;
    if (!parse_dtype(s.dtype, &tv[i].dtype)) fail("store record layout: unknown dtype {}", s.dtype);
    tv[i].shape = s.shape;
    tv[i].data = base + s.offset;
    tv[i].bytes = s.bytes;
  }
  auto lookup = [&](const std::string& n) -> const TensorView* {
    for (const auto& t : tv)
      if (t.name == n) return &t;
    return nullptr;
  };
  const std::string where = "store record (layer " + std::to_string(rec.layer) + ", expert " +
                            std::to_string(rec.expert) + ")";
  return {linear_weight(lookup, "gate", -1, -1, where), linear_weight(lookup, "up", -1, -1, where),
          linear_weight(lookup, "down", -1, -1, where)};
}

}  // namespace deltafin::residency
