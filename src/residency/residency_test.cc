// Streaming through a packed store gives the resident run's logits bit for
// bit (design contract 2) for every fixture: budgets that cache no experts,
// a tenth, half and all of them; 1-4 drive directories; stripe and mirror
// placements; pilot on and off; records read whole and in pieces. Also: the expert cache policies, the heat
// histogram, and expert-major prefill reading each expert once per layer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <fstream>
#include <set>
#include <fmt/format.h>

#include "engine/pack.h"
#include "engine/runtime.h"
#include "engine/session.h"
#include "store/manifest.h"
#include "residency/expert_cache.h"
#include "residency/heat.h"
#include "util/error.h"

namespace deltafin {
namespace fs = std::filesystem;
using residency::CachePolicy;
using residency::ExpertCache;
using residency::expert_key;

namespace {

fs::path scratch_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("deltafin_residency_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<float> score(Runtime& rt, const std::vector<int32_t>& toks, int64_t chunk) {
  Session s(rt.model(), chunk);
  std::vector<float> out(toks.size() * rt.model().vocab());
  s.prefill(toks, out.data(), nullptr);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Fixture folders (reference.json); the checkpoint is model_of(folder).
std::vector<std::string> fixtures() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures"))
    if (fs::exists(e.path() / "reference.json")) v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

std::string model_of(const std::string& fixture) {
  auto j = nlohmann::json::parse(std::ifstream(fs::path(fixture) / "reference.json"));
  return j.contains("model") ? (fs::path(DELTAFIN_SOURCE_DIR) / j["model"].get<std::string>()).string() : fixture;
}

// Packs `model` into dir/store over `drives` drive directories.
std::string pack(const std::string& model, const fs::path& dir, int drives, const std::string& placement) {
  PackOptions o;
  o.model_dir = model;
  o.out_dir = (dir / "store").string();
  for (int d = 0; d < drives; ++d) o.drives.push_back((dir / ("drive" + std::to_string(d))).string());
  o.placement = placement;
  o.progress = false;
  pack_store(o);
  return o.out_dir;
}

}  // namespace

TEST(ExpertCache, LruEvictsLeastRecentLfuLeastUsed) {
  for (CachePolicy p : {CachePolicy::Lru, CachePolicy::Lfu}) {
    ExpertCache c(2, 100, 64, p);
    int a = c.claim(expert_key(0, 1));
    c.set_ready(a);
    int b = c.claim(expert_key(0, 2));
    c.set_ready(b);
    c.touch(a);
    c.touch(a);
    c.touch(b);  // b most recent, a most used
    int v = c.claim(expert_key(0, 3));
    EXPECT_EQ(v, p == CachePolicy::Lru ? a : b);
    EXPECT_EQ(c.find(expert_key(0, 3)), v);
    EXPECT_EQ(c.evictions(), 1u);
  }
  ExpertCache c(1, 100, 64, CachePolicy::Lru);
  int s = c.claim(expert_key(1, 1));
  c.set_ready(s);
  c.ref(s);
  EXPECT_EQ(c.claim(expert_key(1, 2)), -1);  // referenced: never evicted
  c.unref(s);
  c.pin(s);
  EXPECT_EQ(c.claim(expert_key(1, 2)), -1);  // pinned: never evicted
}

TEST(HeatHistogram, HottestAndRoundTrip) {
  residency::HeatHistogram h(2, 4);
  h.add(1, 3, 5);
  h.add(0, 2, 5);
  h.add(0, 1, 1);
  auto top = h.hottest(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0], std::make_pair(0, 2));  // tie broken by lower layer
  EXPECT_EQ(top[1], std::make_pair(1, 3));
  fs::path d = scratch_dir("heat");
  h.save((d / "heat.json").string());
  auto g = residency::HeatHistogram::load((d / "heat.json").string(), 2, 4);
  EXPECT_EQ(g.count(1, 3), 5u);
  EXPECT_THROW(residency::HeatHistogram::load((d / "heat.json").string(), 3, 4), Error);
  fs::remove_all(d);
}

TEST(Streaming, BitIdenticalToResidentForEveryFixtureBudgetDriveCountPlacementAndPilot) {
  const auto fx = fixtures();
  ASSERT_GE(fx.size(), 5u);
  for (const std::string& f : fx) {
    SCOPED_TRACE(f);
    auto ref = nlohmann::json::parse(std::ifstream(fs::path(f) / "reference.json"));
    std::vector<int32_t> toks = ref["sequences"][0]["tokens"].get<std::vector<int32_t>>();
    RuntimeOptions ro;
    ro.threads = 2;
    ro.context = 256;  // the budgets below hold its KV cache (plan.sequence_bytes)
    auto resident = Runtime::open(model_of(f), ro);
    const std::vector<float> want = score(*resident, toks, static_cast<int64_t>(toks.size()));
    // Every dimension for every fixture, without the full product: stripe
    // over 1 drive at every budget with the pilot on and off; stripe over
    // 2, 3, 4 drives and mirror over 2, at the smallest and a tenth budget.
    struct Layout {
      const char* placement;
      int drives;
      bool all_budgets;
    };
    for (const Layout lay : {Layout{"stripe", 1, true}, Layout{"stripe", 2, false}, Layout{"stripe", 3, false},
                             Layout{"stripe", 4, false}, Layout{"mirror", 2, true}}) {
      fs::path dir = scratch_dir("fx");
      const std::string store = pack(model_of(f), dir, lay.drives, lay.placement);
      // Learn the slot size, then budgets of 2 slots (caches nothing
      // useful), a tenth, half, and all the records.
      RuntimeOptions all = ro;
      all.update_heat = false;
      auto probe = Runtime::open(store, all);
      const BudgetPlan plan = probe->budget();
      probe.reset();
      const uint64_t n = plan.expert_records;
      std::vector<uint64_t> budgets = {2, std::max<uint64_t>(2, n / 10)};
      if (lay.all_budgets) budgets.insert(budgets.end(), {std::max<uint64_t>(2, n / 2), n});
      for (uint64_t slots : budgets) {
        for (bool pilot : {false, true}) {
          SCOPED_TRACE(fmt::format("{} drives {} slots {} pilot {}", lay.placement, lay.drives, slots, pilot));
          RuntimeOptions so = ro;
          so.ram_budget = plan.spine + plan.overhead + plan.sequence_bytes + slots * plan.slot_bytes;
          so.pilot = pilot;
          // Records read in 4 KiB pieces with the pilot on, whole with it off.
          so.read_chunk = pilot ? 4096 : 0;
          so.update_heat = false;  // every configuration starts cold (the hot set has its own test)
          auto rt = Runtime::open(store, so);
          // Read every pick from the first hint (the default waits until a
          // rank has proved itself): the most prefetching there can be.
          rt->streaming_source()->set_pilot_rank_policy(0, 0.0);
          EXPECT_EQ(rt->budget().slots, slots);
          EXPECT_TRUE(same_bits(score(*rt, toks, static_cast<int64_t>(toks.size())), want));
          if (slots == 2) {
            EXPECT_TRUE(same_bits(score(*rt, toks, 1), want)) << "token by token";
          }
          EXPECT_GT(rt->stream_stats()->records_read, 0u);
          uint64_t hinted = 0;
          for (const auto& p : rt->stream_stats()->pilot) hinted += p.hinted;
          if (pilot) EXPECT_GT(hinted, 0u) << "the pilot made no predictions";
          else EXPECT_EQ(hinted, 0u);
        }
      }
      fs::remove_all(dir);
    }
  }
}

TEST(Streaming, HotSetLearnedFromThePreviousRun) {
  const std::string f = (fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / "demo_moe").string();
  auto ref = nlohmann::json::parse(std::ifstream(fs::path(f) / "reference.json"));
  std::vector<int32_t> toks = ref["sequences"][0]["tokens"].get<std::vector<int32_t>>();
  fs::path dir = scratch_dir("hot");
  const std::string store = pack(model_of(f), dir, 2, "stripe");
  RuntimeOptions ro;
  ro.threads = 1;
  ro.pilot = false;
  uint64_t pinned_hits[2];
  for (int run = 0; run < 2; ++run) {
    auto rt = Runtime::open(store, ro);
    score(*rt, toks, 1);
    pinned_hits[run] = rt->stream_stats()->hits_pinned;
  }
  EXPECT_EQ(pinned_hits[0], 0u);  // nothing known yet
  EXPECT_GT(pinned_hits[1], 0u);  // heat.json from run 1 pinned the hottest
  EXPECT_TRUE(fs::exists(fs::path(store) / "heat.json"));
  fs::remove_all(dir);
}

TEST(Streaming, PrefillReadsEachExpertOncePerLayer) {
  const std::string model = (fs::path(DELTAFIN_SOURCE_DIR) / "models" / "demo-moe").string();
  ASSERT_TRUE(fs::exists(fs::path(model) / "config.json"));
  fs::path dir = scratch_dir("once");
  const std::string store = pack(model, dir, 2, "stripe");
  std::vector<int32_t> toks(512);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7919 + 13) % 4000 + 10);
  RuntimeOptions ro;
  ro.threads = 2;
  ro.pilot = false;
  ro.update_heat = false;
  ro.context = 512;
  auto probe = Runtime::open(store, ro);
  const BudgetPlan plan = probe->budget();
  probe.reset();
  ro.ram_budget = plan.spine + plan.overhead + plan.sequence_bytes + 8 * plan.slot_bytes;  // far fewer slots than experts
  auto rt = Runtime::open(store, ro);
  Session s(rt->model(), 512);
  std::vector<float> last;
  s.prefill(toks, nullptr, &last);
  const auto* st = rt->stream_stats();
  const uint64_t st_misses = st->misses;
  // Every record read was needed, and none was read twice in a layer: the
  // reads equal the number of distinct (layer, expert) pairs used.
  EXPECT_EQ(st->records_read, st->misses);
  EXPECT_EQ(st->expert_uses, st->misses + st->hits_cached + st->hits_pinned + st->hits_prefetched);
  EXPECT_LE(st->records_read, static_cast<uint64_t>(plan.expert_records));
  // With the pilot on, predictions are read early, but no expert is read
  // twice: a prefetched expert is never evicted before its layer runs.
  rt.reset();
  ro.pilot = true;
  auto rp = Runtime::open(store, ro);
  rp->streaming_source()->set_pilot_rank_policy(0, 0.0);  // read every pick
  Session sp(rp->model(), 512);
  std::vector<float> last_p;
  sp.prefill(toks, nullptr, &last_p);
  EXPECT_EQ(last_p, last);
  const auto* pst = rp->stream_stats();
  EXPECT_EQ(pst->prefetch_evicted, 0u);
  EXPECT_GT(pst->prefetch_issued, 0u);
  EXPECT_LE(pst->records_read, st_misses + pst->prefetch_issued);
  fs::remove_all(dir);
}

TEST(Runtime, ChargesTheContextsKvCacheToTheBudget) {
  const std::string model = (fs::path(DELTAFIN_SOURCE_DIR) / "models" / "demo-moe").string();
  fs::path dir = scratch_dir("ctx");
  const std::string store = pack(model, dir, 1, "stripe");
  RuntimeOptions ro;
  ro.threads = 1;
  ro.update_heat = false;
  ro.context = 64;
  auto probe = Runtime::open(store, ro);
  const BudgetPlan p = probe->budget();
  const uint64_t seq64 = probe->model().sequence_bytes(64), seq4k = probe->model().sequence_bytes(4096);
  EXPECT_EQ(p.context, 64);
  EXPECT_EQ(p.sequence_bytes, seq64);
  EXPECT_GT(seq64, 0u);
  EXPECT_EQ(seq4k, 64 * seq64);  // MLA: the cache grows linearly with the context
  probe.reset();
  // Room for 100 slots besides the spine, the overhead and 64 tokens of KV.
  ro.ram_budget = p.spine + p.overhead + seq64 + 100 * p.slot_bytes;
  {
    auto rt = Runtime::open(store, ro);
    EXPECT_EQ(rt->budget().slots, 100u);
    // Past the context: a clear error, not a larger cache.
    Session s(rt->model(), 16);
    std::vector<int32_t> toks(65, 7);
    try {
      s.prefill(toks, nullptr, nullptr);
      FAIL() << "a 65-token sequence passed --ctx-size 64";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--ctx-size"), std::string::npos) << e.what();
    }
  }
  // The same budget with the default context: its KV cache comes out of the slots.
  ro.context = 0;
  auto rt = Runtime::open(store, ro);
  EXPECT_EQ(rt->budget().context, kDefaultBudgetContext);
  EXPECT_EQ(rt->budget().sequence_bytes, seq4k);
  EXPECT_EQ(rt->budget().slots, (ro.ram_budget - p.spine - p.overhead - seq4k) / p.slot_bytes);
  EXPECT_LT(rt->budget().slots, 100u);
  rt.reset();
  fs::remove_all(dir);
}

TEST(Runtime, RefusesABudgetThatCannotHoldTheSpine) {
  const std::string f = fixtures().front();
  fs::path dir = scratch_dir("refuse");
  const std::string store = pack(model_of(f), dir, 1, "stripe");
  RuntimeOptions ro;
  ro.ram_budget = 1 << 20;
  try {
    Runtime::open(store, ro);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ram-budget"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace deltafin

namespace deltafin {

// A layer whose predictions miss is switched off after its warm-up; the
// logits stay the resident ones.
TEST(Streaming, PilotSwitchesOffLayersThatDoNotPay) {
  const std::string f = (fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / "demo_moe").string();
  auto ref = nlohmann::json::parse(std::ifstream(fs::path(f) / "reference.json"));
  std::vector<int32_t> toks = ref["sequences"][1]["tokens"].get<std::vector<int32_t>>();
  fs::path dir = scratch_dir("pilotoff");
  const std::string store = pack(model_of(f), dir, 1, "stripe");
  RuntimeOptions ro;
  ro.threads = 1;
  ro.update_heat = false;
  auto resident = Runtime::open(model_of(f), ro);
  const std::vector<float> want = score(*resident, toks, 1);
  auto rt = Runtime::open(store, ro);
  // Demand a precision no layer reaches: every layer goes off after 8 hints.
  rt->streaming_source()->set_pilot_policy(8, 1.01);
  EXPECT_TRUE(same_bits(score(*rt, toks, 1), want));
  uint64_t off = 0, skipped = 0, hinted = 0;
  for (const auto& p : rt->stream_stats()->pilot) {
    off += p.off;
    skipped += p.skipped;
    hinted += p.hinted;
  }
  EXPECT_GT(off, 0u);
  EXPECT_GT(skipped, 0u);
  EXPECT_GT(hinted, 0u);
  fs::remove_all(dir);
}

// Ranks: the pilot reads a pick only once its rank has been checked (without
// reading) and found right often enough; the logits never change.
TEST(Streaming, PilotReadsOnlyRanksThatHaveProvedThemselves) {
  const std::string f = (fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / "demo_moe").string();
  auto ref = nlohmann::json::parse(std::ifstream(fs::path(f) / "reference.json"));
  std::vector<int32_t> toks = ref["sequences"][1]["tokens"].get<std::vector<int32_t>>();
  fs::path dir = scratch_dir("pilotrank");
  const std::string store = pack(model_of(f), dir, 1, "stripe");
  RuntimeOptions ro;
  ro.threads = 1;
  ro.update_heat = false;
  ro.ram_budget = 0;
  auto resident = Runtime::open(model_of(f), ro);
  const std::vector<float> want = score(*resident, toks, 1);
  {
    // A precision no rank reaches: picks are checked, never read.
    auto rt = Runtime::open(store, ro);
    rt->streaming_source()->set_pilot_rank_policy(2, 1.01);
    EXPECT_TRUE(same_bits(score(*rt, toks, 1), want));
    uint64_t hinted = 0;
    for (const auto& p : rt->stream_stats()->pilot) {
      hinted += p.hinted;
      EXPECT_EQ(p.ranks_read, 0);
    }
    EXPECT_GT(hinted, 0u);
    EXPECT_EQ(rt->stream_stats()->prefetch_issued, 0u);
  }
  {
    // Any precision pays: after 2 checks of each rank, its picks are read.
    auto rt = Runtime::open(store, ro);
    rt->streaming_source()->set_pilot_rank_policy(2, 0.0);
    EXPECT_TRUE(same_bits(score(*rt, toks, 1), want));
    EXPECT_GT(rt->stream_stats()->prefetch_issued, 0u);
    int best = 0;
    for (const auto& p : rt->stream_stats()->pilot) best = std::max(best, p.ranks_read);
    EXPECT_GT(best, 0);
  }
  fs::remove_all(dir);
}

}  // namespace deltafin

namespace deltafin {

// An interrupted pack leaves an incomplete manifest listing the records made
// durable; running the same command again resumes after them, and the store
// verifies and serves the same logits.
TEST(Pack, ResumesAfterInterruption) {
  const std::string f = (fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / "demo_moe").string();
  fs::path dir = scratch_dir("resume");
  const std::string store = pack(model_of(f), dir, 2, "stripe");
  store::Manifest full = store::Manifest::load(store);
  store::Manifest part = full;
  part.complete = false;
  part.records.resize(full.records.size() / 3);
  part.index();
  part.save((fs::path(store) / store::kManifestFile).string());
  EXPECT_THROW(store::Manifest::load(store), Error);  // an incomplete store is refused
  PackOptions o;
  o.model_dir = model_of(f);
  o.out_dir = store;
  o.drives = {(dir / "drive0").string(), (dir / "drive1").string()};
  o.progress = false;
  PackResult r = pack_store(o);
  EXPECT_EQ(r.records_skipped, full.records.size() / 3);
  EXPECT_EQ(r.records, full.records.size() - full.records.size() / 3);
  store::Manifest again = store::Manifest::load(store);
  ASSERT_EQ(again.records.size(), full.records.size());
  for (size_t i = 0; i < full.records.size(); ++i) EXPECT_EQ(again.records[i].checksum, full.records[i].checksum);
  EXPECT_EQ(verify_store(store, nullptr), full.records.size());
  // Another model into the same store directory is refused, naming it.
  o.model_dir = (fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / "mixtral_bf16").string();
  EXPECT_THROW(pack_store(o), Error);
  fs::remove_all(dir);
}

// The pread fallback engine serves the same bits as io_uring.
TEST(Streaming, PreadEngineBitIdentical) {
  const std::string f = (fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / "deepseek_v3_int4").string();
  auto ref = nlohmann::json::parse(std::ifstream(fs::path(f) / "reference.json"));
  std::vector<int32_t> toks = ref["sequences"][0]["tokens"].get<std::vector<int32_t>>();
  fs::path dir = scratch_dir("pread");
  const std::string store = pack(f, dir, 2, "mirror");
  RuntimeOptions ro;
  ro.threads = 2;
  ro.update_heat = false;
  auto resident = Runtime::open(f, ro);
  const std::vector<float> want = score(*resident, toks, 3);
  ro.io = store::IoKind::Pread;
  ro.verify_reads = true;
  auto rt = Runtime::open(store, ro);
  EXPECT_TRUE(same_bits(score(*rt, toks, 3), want));
  EXPECT_GT(rt->stream_stats()->records_read, 0u);
  fs::remove_all(dir);
}

}  // namespace deltafin
