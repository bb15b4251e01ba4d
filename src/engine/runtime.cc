#include "engine/runtime.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/parse.h"

namespace deltafin {

namespace fs = std::filesystem;

uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

std::string checkpoint_dir_of(const std::string& path) {
  if (!fs::exists(fs::path(path) / store::kManifestFile)) return path;
  return store::Manifest::load(path).source.value("model_dir", path);
}

std::unique_ptr<Runtime> Runtime::open(const std::string& path, const RuntimeOptions& opts) {
  auto rt = std::unique_ptr<Runtime>(new Runtime());
  rt->opts_ = opts;
  rt->pool_ = std::make_unique<ThreadPool>(opts.threads > 0 ? opts.threads : default_thread_count());
  ModelOptions mo;
  mo.pool = rt->pool_.get();
  if (opts.context < 0) fail("--ctx-size must be positive");
  if (!fs::exists(fs::path(path) / store::kManifestFile)) {
    if (opts.ram_budget > 0)
      fail("--ram-budget needs a packed store; run `deltafin pack --model {} --out STORE --drives DIR` first", path);
    rt->ck_ = Checkpoint::open(path);
    mo.max_context = opts.context;
    rt->model_ = load_model(*rt->ck_, mo);
    rt->plan_.context = opts.context;
    rt->plan_.sequence_bytes = opts.context > 0 ? rt->model_->sequence_bytes(opts.context) : 0;
    return rt;
  }
  // A store: the spine from the source checkpoint, experts from the drives.
  rt->store_dir_ = path;
  store::IoOptions io;
  io.queue_depth = opts.queue_depth;
  rt->io_ = store::make_io_engine(opts.io, io);
  store::StoreOptions so;
  so.drives = opts.drives;
  so.verify_reads = opts.verify_reads;
  so.chunk_bytes = opts.read_chunk;
  so.missing = opts.skip_missing_drives ? store::MissingDrive::Skip : store::MissingDrive::Fail;
  rt->store_ = std::make_unique<store::ExpertStore>(path, *rt->io_, so);
  const store::Manifest& man = rt->store_->manifest();
  const std::string src = man.source.value("model_dir", "");
  if (src.empty() || !fs::exists(fs::path(src) / "config.json"))
    fail("{}: the source checkpoint {} (which holds the spine) is missing; restore it or re-run pack", path, src);
  rt->ck_ = Checkpoint::open(src);
  if (rt->ck_->config().json() != man.model_config)
    fail("{}: the checkpoint at {} has changed since the store was packed; re-run pack", path, src);
  // Load once against the checkpoint to learn the shape, then plan the budget.
  int layers = 0, experts = 0;
  uint64_t spine = 0;
  BudgetPlan& plan = rt->plan_;
  plan.context = opts.context > 0 ? opts.context : opts.ram_budget > 0 ? kDefaultBudgetContext : 0;
  {
    auto probe = load_model(*rt->ck_, mo);
    const ModelSummary& s = probe->summary();
    layers = static_cast<int>(s.layers);
    experts = static_cast<int>(s.experts_per_layer);
    spine = s.spine_bytes;
    plan.sequence_bytes = plan.context > 0 ? probe->sequence_bytes(plan.context) : 0;
  }
  plan.spine = spine;
  plan.overhead = kFixedOverheadBytes;
  plan.expert_records = man.records.size();
  uint64_t max_buf = 0;
  for (const auto& r : man.records) max_buf = std::max(max_buf, rt->store_->buffer_bytes(r));
  plan.slot_bytes = (max_buf + rt->store_->buffer_alignment() - 1) / rt->store_->buffer_alignment() *
                    rt->store_->buffer_alignment();
  const uint64_t min_slots = 2;
  if (opts.ram_budget == 0) {
    plan.budget = 0;
    plan.slots = plan.expert_records;
  } else {
    plan.budget = opts.ram_budget;
    const uint64_t fixed = spine + plan.overhead + plan.sequence_bytes;
    if (opts.ram_budget < fixed + min_slots * plan.slot_bytes)
      fail("--ram-budget {} cannot hold the spine ({}) plus the fixed overhead ({}), the KV cache of {} tokens "
           "({}, --ctx-size) and {} expert slots of {}; use at least {}",
           format_bytes(static_cast<double>(opts.ram_budget)), format_bytes(static_cast<double>(spine)),
           format_bytes(static_cast<double>(plan.overhead)), plan.context,
           format_bytes(static_cast<double>(plan.sequence_bytes)), min_slots,
           format_bytes(static_cast<double>(plan.slot_bytes)),
           format_bytes(static_cast<double>(fixed + min_slots * plan.slot_bytes)));
    plan.slots = std::min<uint64_t>((opts.ram_budget - fixed) / plan.slot_bytes, plan.expert_records);
  }
  const std::string heat_path = (fs::path(path) / "heat.json").string();
  rt->heat_ = std::make_unique<residency::HeatHistogram>(residency::HeatHistogram::load(heat_path, layers, experts));
  rt->cache_ = std::make_unique<residency::ExpertCache>(plan.slots, plan.slot_bytes, rt->store_->buffer_alignment(),
                                                        opts.cache_policy, rt->pool_.get());
  rt->streaming_ = std::make_unique<residency::StreamingExperts>(*rt->store_, *rt->cache_, layers, experts,
                                                                 rt->heat_.get());
  rt->streaming_->set_pilot(opts.pilot);
  rt->streaming_->set_pilot_reads(opts.pilot_reads);
  // Pin the hot set: the hottest experts of past runs, leaving dynamic slots.
  uint64_t pin = plan.slots > min_slots ? static_cast<uint64_t>(opts.hot_fraction * static_cast<double>(plan.slots)) : 0;
  pin = std::min(pin, plan.slots - std::min(plan.slots, min_slots));
  plan.pinned_slots = rt->streaming_->preload_pinned(rt->heat_->hottest(pin));
  mo.experts = rt->streaming_.get();
  mo.pilot = opts.pilot;
  mo.max_context = plan.context;
  rt->model_ = load_model(*rt->ck_, mo);
  return rt;
}

void Runtime::save_heat() {
  if (heat_ && opts_.update_heat) heat_->save((fs::path(store_dir_) / "heat.json").string());
}

Runtime::~Runtime() {
  model_.reset();
  try {
    save_heat();
  } catch (const Error&) {
  }
}

}  // namespace deltafin
