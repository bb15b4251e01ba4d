// Walks every reference fixture under tests/fixtures/ (docs/fixtures.md):
// the engine's logits match the float64 transformers reference within the
// fixture's tolerance, greedy continuations give the reference's tokens, and
// the logits are bit-identical across thread counts and prefill chunkings
// (design contracts 2 and 3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "format/checkpoint.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace deltafin {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> fixture_names() {
  std::vector<std::string> v;
  fs::path root = fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures";
  if (fs::is_directory(root))
    for (const auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "reference.json")) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in) << p;
  std::vector<float> v(static_cast<size_t>(in.tellg()) / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

struct Runner {
  std::unique_ptr<Checkpoint> ck;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Model> model;
  Runner(const fs::path& dir, int threads) {
    ck = Checkpoint::open(dir);
    pool = std::make_unique<ThreadPool>(threads);
    ModelOptions o;
    o.pool = pool.get();
    model = load_model(*ck, o);
  }
  std::vector<float> score(const std::vector<int32_t>& toks, int64_t chunk) {
    Session s(*model, chunk);
    std::vector<float> out(toks.size() * model->vocab());
    s.prefill(toks, out.data(), nullptr);
    return out;
  }
};

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The reference files; the checkpoint is here too unless reference.json
  // names a model folder of the repository ("model", for shipped models).
  fs::path dir() const { return fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / GetParam(); }
  nlohmann::json ref() const { return read_json_file(dir() / "reference.json"); }
  fs::path model_dir() const {
    auto j = ref();
    return j.contains("model") ? fs::path(DELTAFIN_SOURCE_DIR) / j["model"].get<std::string>() : dir();
  }
};

}  // namespace

TEST(Fixtures, Present) {
  // The suite must not pass vacuously: the committed fixtures are found.
  EXPECT_GE(fixture_names().size(), 5u);
}

TEST_P(FixtureTest, LogitsMatchReference) {
  auto j = ref();
  const double tol = j.value("tolerance", 1e-3);
  Runner run(model_dir(), 2);
  const int64_t V = run.model->vocab();
  for (const auto& seq : j["sequences"]) {
    std::vector<int32_t> toks = seq["tokens"].get<std::vector<int32_t>>();
    std::vector<float> want = read_f32(dir() / seq["logits"].get<std::string>());
    ASSERT_EQ(want.size(), toks.size() * V);
    std::vector<float> got = run.score(toks, static_cast<int64_t>(toks.size()));
    for (size_t p = 0; p < toks.size(); ++p) {
      double maxref = 0, maxdiff = 0;
      for (int64_t v = 0; v < V; ++v) {
        maxref = std::max(maxref, std::fabs(static_cast<double>(want[p * V + v])));
        maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(got[p * V + v]) - want[p * V + v]));
      }
      EXPECT_LE(maxdiff, tol * maxref) << GetParam() << " position " << p << " max|ref| " << maxref;
    }
  }
}

TEST_P(FixtureTest, GreedyMatchesReference) {
  auto j = ref();
  Runner run(model_dir(), 2);
  for (const auto& g : j["greedy"]) {
    std::vector<int32_t> prompt = g["prompt"].get<std::vector<int32_t>>();
    std::vector<int32_t> want = g["generated"].get<std::vector<int32_t>>();
    Session s(*run.model, 512);
    std::vector<float> logits;
    s.prefill(prompt, nullptr, &logits);
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
      int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      got.push_back(t);
      if (i + 1 < want.size()) s.decode(t, logits);
    }
    EXPECT_EQ(got, want) << GetParam();
  }
}

TEST_P(FixtureTest, BitIdenticalAcrossThreadsAndChunks) {
  auto j = ref();
  std::vector<int32_t> toks = j["sequences"][0]["tokens"].get<std::vector<int32_t>>();
  Runner one(model_dir(), 1), two(model_dir(), 2), three(model_dir(), 3);
  const int64_t n = static_cast<int64_t>(toks.size());
  std::vector<float> base = two.score(toks, n);
  auto same = [&](const std::vector<float>& v) {
    return v.size() == base.size() && std::memcmp(v.data(), base.data(), v.size() * 4) == 0;
  };
  EXPECT_TRUE(same(one.score(toks, n))) << "threads 1 vs 2";
  EXPECT_TRUE(same(three.score(toks, n))) << "threads 3 vs 2";
  EXPECT_TRUE(same(two.score(toks, 1))) << "chunk 1 vs whole";
  EXPECT_TRUE(same(two.score(toks, 7))) << "chunk 7 vs whole";
  EXPECT_TRUE(same(one.score(toks, 3))) << "threads 1 chunk 3 vs whole";
}

INSTANTIATE_TEST_SUITE_P(All, FixtureTest, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FixtureTest);

}  // namespace deltafin
