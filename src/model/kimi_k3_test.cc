// Kimi K3 on the tiny fixture tests/fixtures/kimi_k3_mxfp4 (made by
// tools/k3_reference.py): accuracy against the float64 reference (printed),
// a sequence's state (KDA recurrent + conv states, MLA caches) saved,
// rolled back after rejected draft tokens and replayed bit for bit, the
// vision tensors left out, and a clear error for a config without text_config.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "format/checkpoint.h"
#include "model/model.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace deltafin {
namespace fs = std::filesystem;

namespace {

fs::path fixture() { return fs::path(DELTAFIN_SOURCE_DIR) / "tests" / "fixtures" / "kimi_k3_mxfp4"; }

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  std::vector<float> v(static_cast<size_t>(in.tellg()) / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

struct K3 {
  std::unique_ptr<Checkpoint> ck = Checkpoint::open(fixture());
  ThreadPool pool{2};
  std::unique_ptr<Model> model;
  K3() {
    ModelOptions o;
    o.pool = &pool;
    model = load_model(*ck, o);
  }
  // Logits of `tokens` appended to `seq`, in blocks of `chunk` rows.
  std::vector<float> run(SequenceState& seq, std::span<const int32_t> tokens, size_t chunk) {
    const int64_t V = model->vocab();
    std::vector<float> out(tokens.size() * V);
    for (size_t i = 0; i < tokens.size(); i += chunk) {
      const size_t n = std::min(chunk, tokens.size() - i);
      model->forward(seq, tokens.subspan(i, n), out.data() + i * V);
    }
    return out;
  }
};

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

std::vector<int32_t> tokens_of(int seq) {
  auto j = read_json_file(fixture() / "reference.json");
  return j["sequences"][seq]["tokens"].get<std::vector<int32_t>>();
}

}  // namespace

TEST(KimiK3, MatchesFloat64Reference) {
  K3 k;
  auto j = read_json_file(fixture() / "reference.json");
  EXPECT_EQ(j["arch"], "kimi_k3");
  const double tol = j["tolerance"].get<double>();
  const int64_t V = k.model->vocab();
  double worst = 0;
  for (const auto& s : j["sequences"]) {
    auto toks = s["tokens"].get<std::vector<int32_t>>();
    auto want = read_f32(fixture() / s["logits"].get<std::string>());
    auto seq = k.model->new_sequence();
    auto got = k.run(*seq, toks, toks.size());
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < toks.size(); ++p) {
      double maxref = 0, maxdiff = 0;
      for (int64_t v = 0; v < V; ++v) {
        maxref = std::max(maxref, std::fabs(static_cast<double>(want[p * V + v])));
        maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(got[p * V + v]) - want[p * V + v]));
      }
      worst = std::max(worst, maxdiff / maxref);
    }
  }
  std::printf("kimi_k3_mxfp4: max |engine - float64 reference| / max |reference| = %.3g (tolerance %.3g)\n", worst,
              tol);
  EXPECT_LE(worst, tol);
}

TEST(KimiK3, SnapshotRollsBackRejectedDraftsAndReplaysExactly) {
  K3 k;
  const std::vector<int32_t> toks = tokens_of(1);  // 23 tokens
  const int64_t V = k.model->vocab();
  const size_t keep = 9;  // accepted prefix
  auto whole = k.model->new_sequence();
  const std::vector<float> want = k.run(*whole, toks, toks.size());

  auto seq = k.model->new_sequence();
  k.run(*seq, std::span(toks).first(keep), 4);
  auto saved = seq->snapshot();
  ASSERT_EQ(saved->length(), static_cast<int64_t>(keep));
  // A draft that the target rejects: other tokens, verified as one block.
  std::vector<int32_t> draft = {7, 8, 9, 10, 11};
  k.run(*seq, draft, draft.size());
  EXPECT_EQ(seq->length(), static_cast<int64_t>(keep + draft.size()));
  // Without the rollback the continuation differs (the state carries the draft).
  auto polluted = k.run(*seq, std::span(toks).subspan(keep), toks.size());
  EXPECT_FALSE(same_bits(polluted.data(), want.data() + keep * V, polluted.size()));

  // Roll back and replay the real continuation: the same bits as the uncut run.
  seq->restore(*saved);
  EXPECT_EQ(seq->length(), static_cast<int64_t>(keep));
  auto replay = k.run(*seq, std::span(toks).subspan(keep), 1);
  EXPECT_TRUE(same_bits(replay.data(), want.data() + keep * V, replay.size()));

  // The snapshot is a deep copy: it survives the replay and restores again.
  seq->restore(*saved);
  auto again = k.run(*seq, std::span(toks).subspan(keep), 5);
  EXPECT_TRUE(same_bits(again.data(), want.data() + keep * V, again.size()));
  saved.reset();  // freed while seq lives on
  EXPECT_EQ(seq->length(), static_cast<int64_t>(toks.size()));
}

TEST(KimiK3, IgnoresVisionTensorsAndCountsTheTextModel) {
  K3 k;
  const ModelSummary& s = k.model->summary();
  EXPECT_EQ(s.arch, "kimi_k3");
  EXPECT_EQ(s.layers, 5);
  EXPECT_EQ(s.moe_layers, 4);
  EXPECT_EQ(s.experts_per_layer, 12);
  EXPECT_EQ(s.experts_per_token, 4);
  uint64_t text = 0, vision = 0;
  for (const auto& [name, t] : k.ck->all_tensors()) (name.starts_with("language_model.") ? text : vision) += t->bytes;
  EXPECT_GT(vision, 0u);  // the fixture carries vision tensors...
  EXPECT_EQ(s.spine_bytes + s.expert_bytes, text);  // ...which are not counted
  // One expert: w1, w3 [32, 32] and w2 [32, 32] as MXFP4 (16 packed bytes + 1 scale per row).
  EXPECT_EQ(s.bytes_per_expert, 3u * 32u * (16u + 1u));
}

TEST(KimiK3, ConfigWithoutTextConfigIsAClearError) {
  const fs::path dir = fs::temp_directory_path() / ("deltafin_k3_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(fixture()))
    if (e.path().filename() != "config.json") fs::create_symlink(e.path(), dir / e.path().filename());
  auto cfg = read_json_file(fixture() / "config.json");
  cfg.erase("text_config");
  std::ofstream(dir / "config.json") << cfg.dump();
  auto ck = Checkpoint::open(dir);
  try {
    load_model(*ck, {});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("text_config"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace deltafin
