// Everything a run needs, opened from a model path: a Hugging Face
// checkpoint (experts read from its own mapping) or a packed store (experts
// streamed from drives through the RAM budget's cache, the spine from the
// source checkpoint). The CLI and the tests build models only through this.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "model/model.h"
#include "residency/expert_cache.h"
#include "residency/heat.h"
#include "residency/streaming.h"
#include "store/expert_store.h"
#include "store/io_engine.h"
#include "util/thread_pool.h"

namespace deltafin {

struct RuntimeOptions {
  int threads = 0;                    // 0: all cores
  // The longest sequence, tokens (--ctx-size). 0: kDefaultBudgetContext with
  // a --ram-budget (its KV cache is charged to the budget), else unlimited.
  int64_t context = 0;
  // Store only:
  uint64_t ram_budget = 0;            // bytes; 0: no limit (every expert may be cached)
  std::vector<std::string> drives;    // override the manifest's drive directories
  store::IoKind io = store::IoKind::Uring;
  int queue_depth = 16;               // reads (pieces of read_chunk) in flight per drive
  uint64_t read_chunk = 2ull << 20;   // bytes per read piece; 0: whole records (docs/store.md)
  bool pilot = true;
  size_t pilot_reads = 0;             // prefetch reads per layer (0: every pick)
  residency::CachePolicy cache_policy = residency::CachePolicy::Lru;
  double hot_fraction = 0.5;          // share of expert slots pinned from the heat histogram
  bool verify_reads = false;
  bool update_heat = true;            // write the run's routes into STORE/heat.json
  bool skip_missing_drives = false;   // read mirrors when a drive directory is gone
};

// The RAM the engine needs besides the spine and the expert slots: scratch,
// caches of small models, allocator slack (documented in docs/residency.md).
constexpr uint64_t kFixedOverheadBytes = 16ull << 20;
// The context a --ram-budget run holds when --ctx-size is not given.
constexpr int64_t kDefaultBudgetContext = 4096;

struct BudgetPlan {
  uint64_t budget = 0, spine = 0, overhead = 0;
  int64_t context = 0;          // tokens (0: unlimited)
  uint64_t sequence_bytes = 0;  // one sequence's KV caches / recurrent states at `context`
  uint64_t slot_bytes = 0, slots = 0, pinned_slots = 0;
  uint64_t expert_records = 0;
};

class Runtime {
 public:
  // `path`: a model directory (config.json) or a store (manifest.json).
  // Throws Error with a clear message (missing files, budget too small).
  static std::unique_ptr<Runtime> open(const std::string& path, const RuntimeOptions& opts);
  ~Runtime();

  Model& model() { return *model_; }
  const Checkpoint& checkpoint() const { return *ck_; }
  ThreadPool& pool() { return *pool_; }
  bool streaming() const { return streaming_ != nullptr; }
  // Store runs only (nullptr otherwise).
  const residency::StreamStats* stream_stats() const { return streaming_ ? &streaming_->stats() : nullptr; }
  const store::ExpertStore* expert_store() const { return store_.get(); }
  residency::StreamingExperts* streaming_source() { return streaming_.get(); }
  const BudgetPlan& budget() const { return plan_; }
  // Writes the heat histogram back (also done on destruction when enabled).
  void save_heat();

 private:
  Runtime() = default;
  RuntimeOptions opts_;
  std::string store_dir_;
  std::unique_ptr<Checkpoint> ck_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<store::IoEngine> io_;
  std::unique_ptr<store::ExpertStore> store_;
  std::unique_ptr<residency::ExpertCache> cache_;
  std::unique_ptr<residency::HeatHistogram> heat_;
  std::unique_ptr<residency::StreamingExperts> streaming_;
  std::unique_ptr<Model> model_;
  BudgetPlan plan_;
};

// The Hugging Face checkpoint behind `path`: the path itself, or for a store
// its source checkpoint (where the spine, tokenizer and configs live).
std::string checkpoint_dir_of(const std::string& path);

// Peak resident set size of this process (VmHWM), bytes.
uint64_t peak_rss_bytes();

}  // namespace deltafin
