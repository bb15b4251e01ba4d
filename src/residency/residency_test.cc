// Streaming through a packed store gives the resident run's logits bit for
// bit (design contract 2) for every fixture: budgets that cache no experts,
// a tenth, half and all of them; 1-4 drive directories; stripe and mirror
// placements; pilot on and off. Also: the expert cache policies, the heat
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
    auto resident = Runtime::open(model_of(f), ro);
    const std::vector<float> want = score(*resident, toks, static_cast<int64_t>(toks.size()));
    int drives = 1;
    for (const std::string placement : {"stripe", "mirror"}) {
      for (; drives <= 4; ++drives) {
        fs::path dir = scratch_dir("fx");
        const std::string store = pack(model_of(f), dir, drives, placement);
        // Learn the slot size, then budgets of 2 slots (caches nothing
        // useful), a tenth, half, and all the records.
        RuntimeOptions all = ro;
        all.update_heat = false;
        auto probe = Runtime::open(store, all);
        const BudgetPlan plan = probe->budget();
        probe.reset();
        const uint64_t n = plan.expert_records;
        for (uint64_t slots : {uint64_t{2}, std::max<uint64_t>(2, n / 10), std::max<uint64_t>(2, n / 2), n}) {
          for (bool pilot : {false, true}) {
            SCOPED_TRACE(fmt::format("{} drives {} slots {} pilot {}", placement, drives, slots, pilot));
            RuntimeOptions so = ro;
            so.ram_budget = plan.spine + plan.overhead + slots * plan.slot_bytes;
            so.pilot = pilot;
            so.update_heat = false;  // every configuration starts cold (the hot set has its own test)
            auto rt = Runtime::open(store, so);
            EXPECT_EQ(rt->budget().slots, slots);
            EXPECT_TRUE(same_bits(score(*rt, toks, static_cast<int64_t>(toks.size())), want));
            EXPECT_TRUE(same_bits(score(*rt, toks, 1), want)) << "token by token";
            EXPECT_GT(rt->stream_stats()->records_read, 0u);
            uint64_t hinted = 0;
            for (const auto& p : rt->stream_stats()->pilot) hinted += p.hinted;
            if (pilot) EXPECT_GT(hinted, 0u) << "the pilot made no predictions";
            else EXPECT_EQ(hinted, 0u);
          }
        }
        fs::remove_all(dir);
        if (placement == std::string("mirror") && drives == 2) break;  // mirror: 1 and 2 drives
      }
      drives = 1;
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
  auto probe = Runtime::open(store, ro);
  const BudgetPlan plan = probe->budget();
  probe.reset();
  ro.ram_budget = plan.spine + plan.overhead + 8 * plan.slot_bytes;  // far fewer slots than experts
  auto rt = Runtime::open(store, ro);
  Session s(rt->model(), 512);
  std::vector<float> last;
  s.prefill(toks, nullptr, &last);
  const auto* st = rt->stream_stats();
  // Every record read was needed, and none was read twice in a layer: the
  // reads equal the number of distinct (layer, expert) pairs used.
  EXPECT_EQ(st->records_read, st->misses);
  EXPECT_EQ(st->expert_uses, st->misses + st->hits_cached + st->hits_pinned + st->hits_prefetched);
  EXPECT_LE(st->records_read, static_cast<uint64_t>(plan.expert_records));
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

}  // namespace deltafin
