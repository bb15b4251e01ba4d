// StreamingExperts: the ExpertSource that reads routed experts from a packed
// store as the router asks for them, through a RAM cache (pinned hot set +
// dynamic slots), and hands each to compute as soon as its bytes land.
// The pilot's hints (prefetch_hint) issue reads for the next layer early.
//
// Contract 2: the model sums expert outputs in router order, so the order in
// which experts are handed out here never changes a bit of the logits.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "model/model.h"
#include "residency/expert_cache.h"
#include "residency/heat.h"
#include "store/expert_store.h"

namespace deltafin::residency {

struct PilotLayerStats {
  static constexpr int kRanks = 32;  // picks ranked lower share the last entry
  uint64_t hinted = 0;   // experts the pilot predicted for the layer
  uint64_t needed = 0;   // experts the layer then used (in blocks that had a hint)
  uint64_t correct = 0;  // predicted and used
  bool off = false;      // switched off: its precision did not pay for the reads
  uint64_t skipped = 0;  // hints ignored once off
  // By the pick's rank in the hint (0: the most likely): how often a pick of
  // that rank was made, and was right.
  std::array<uint64_t, kRanks> rank_hinted{}, rank_correct{};
  // The ranks read now: the leading ranks whose precision has been seen to
  // pay (none until each has been checked `warmup` times).
  int ranks_read = 0;
  double recall() const { return needed ? double(correct) / needed : 0; }
  double precision() const { return hinted ? double(correct) / hinted : 0; }
};

struct StreamStats {
  uint64_t expert_uses = 0;       // experts handed to compute
  uint64_t hits_pinned = 0, hits_cached = 0, hits_prefetched = 0, misses = 0;
  uint64_t records_read = 0, bytes_read = 0;
  uint64_t prefetch_issued = 0, prefetch_cancelled = 0;
  uint64_t prefetch_evicted = 0;  // prefetched, then evicted before its layer ran (read twice)
  double io_wait_s = 0;           // time compute waited for reads (not hidden by compute)
  double read_latency_sum_s = 0;  // sum of record read latencies
  std::vector<PilotLayerStats> pilot;  // per layer
};

class StreamingExperts : public ExpertSource {
 public:
  // layers/experts: the model's MoE shape (layer indices < layers).
  StreamingExperts(store::ExpertStore& store, ExpertCache& cache, int layers, int experts, HeatHistogram* heat);
  ~StreamingExperts() override;

  // Reads the given experts into slots and pins them (the hot set). Stops
  // when no slot is left. Not counted in the per-token statistics.
  size_t preload_pinned(const std::vector<std::pair<int, int>>& hot);
  // Pilot hints on or off. A layer whose measured precision is below
  // min_precision after warmup_hints predictions is switched off for the
  // rest of the run: its wrong guesses would cost more reads than its right
  // ones save.
  void set_pilot(bool on) { pilot_on_ = on; }
  // At most this many prefetch reads per hint (the most likely picks first;
  // 0: all): a layer's idle drive time holds only a few records, and every
  // further guess costs a slot and drive time when it is wrong.
  void set_pilot_reads(size_t n) { pilot_reads_ = n; }
  // A pick of rank k is read only once the picks of every rank <= k have
  // been checked `warmup` times and were right at least `min_precision` of
  // the time: deeper picks are right less often, and a wrong guess costs a
  // slot (an evicted cached expert) and drive time. Measured on random
  // weights (bench/results/read-fraction-*.md): even 80 %-right top picks
  // did not pay there, hence the high default.
  void set_pilot_rank_policy(uint64_t warmup, double min_precision) {
    rank_warmup_ = warmup;
    rank_min_precision_ = min_precision;
  }
  void set_pilot_policy(uint64_t warmup_hints, double min_precision) {
    pilot_warmup_ = warmup_hints;
    pilot_min_precision_ = min_precision;
  }

  void begin_layer(int layer, std::span<const int32_t> experts) override;
  int32_t next(ExpertWeights* out) override;
  void release(int32_t expert) override;
  void prefetch_hint(int layer, std::span<const int32_t> experts) override;

  const StreamStats& stats() const { return stats_; }

 private:
  void issue(int layer, int expert, int slot, bool urgent);
  void issue_deferred();
  void pump(bool block);
  ExpertWeights views(int slot, const store::Record& rec);

  store::ExpertStore& store_;
  ExpertCache& cache_;
  int layers_, experts_;
  HeatHistogram* heat_;
  bool pilot_on_ = true;
  uint64_t pilot_warmup_ = 64;
  double pilot_min_precision_ = 0.25;
  size_t pilot_reads_ = 0;
  uint64_t rank_warmup_ = 8;
  double rank_min_precision_ = 0.9;

  int layer_ = -1;
  std::set<int32_t> want_;                  // current layer: not yet handed out
  std::deque<int32_t> ready_;               // current layer: landed, to hand out
  std::deque<int32_t> deferred_;            // current layer: misses waiting for a slot
  std::unordered_map<int32_t, int> in_use_;  // handed out: expert -> slot
  std::unordered_map<uint64_t, int> loading_;  // key -> slot with a read outstanding
  std::set<uint64_t> prefetched_;           // keys loaded by a hint and not yet used
  // Prefetched slots are held (referenced) until their layer begins, so that
  // the current layer's misses never evict them; at most half the dynamic
  // slots are held, so the current layer always has slots to cycle through.
  std::map<uint64_t, int> held_;
  size_t pinned_ = 0;
  std::map<int, std::vector<int32_t>> hints_;  // layer -> predicted experts, most likely first
  std::vector<store::RecordCompletion> done_;
  std::vector<int32_t> wrong_;                     // begin_layer scratch
  std::vector<std::pair<int32_t, bool>> misses_;   // begin_layer scratch
  StreamStats stats_;
};

}  // namespace deltafin::residency
