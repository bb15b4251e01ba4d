// Kimi K3 on the tiny fixture tests/fixtures/kimi_k3_mxfp4 (made by
// tools/k3_reference.py): accuracy against the float64 reference (printed),
// a sequence's state (KDA recurrent + conv states, MLA caches) saved,
// rolled back after rejected draft tokens and replayed bit for bit, the
// vision tensors left out, a clear error for a config without text_config,
// and the tensor plan (kimi_k3_tensors) against the fixture and against the
// published checkpoint's tensor count and parameter total.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "format/checkpoint.h"
#include "model/architectures.h"
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

  // The same snapshot restores again after the replay.
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

TEST(KimiK3, TensorPlanIsTheFixturesTextTensors) {
  auto ck = Checkpoint::open(fixture());
  std::map<std::string, const TensorSpec*> plan;
  const auto specs = kimi_k3_tensors(ck->config());
  for (const auto& t : specs) plan[t.name] = &t;
  EXPECT_EQ(plan.size(), specs.size()) << "duplicate names";
  size_t text = 0;
  for (const auto& [name, t] : ck->all_tensors()) {
    if (!name.starts_with("language_model.")) continue;
    ++text;
    auto it = plan.find(name);
    ASSERT_NE(it, plan.end()) << name << " is in the fixture but not in the plan";
    EXPECT_EQ(it->second->dtype, t->dtype) << name;
    EXPECT_EQ(it->second->shape, t->shape) << name;
    EXPECT_EQ(it->second->bytes(), t->bytes) << name;
  }
  EXPECT_EQ(text, plan.size());
}

// The published Kimi K3 config.json (moonshotai/Kimi-K3), the fields the
// text model reads. Its checkpoint lists 497,220 tensors with 1,503,647,073,024
// elements in all; 168 of them (447,358,976 elements) are the vision tower
// and projector.
constexpr const char* kPublishedK3 = R"({
  "model_type": "kimi_k3", "tie_word_embeddings": false,
  "text_config": {
    "model_type": "kimi_linear", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
    "attn_res_block_size": 12, "first_k_dense_replace": 1, "hidden_act": "situ", "hidden_size": 7168,
    "intermediate_size": 33792, "kv_lora_rank": 512, "latent_moe_use_norm": true,
    "linear_attn_config": {
      "full_attn_layers": [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93],
      "gate_lower_bound": -5.0, "head_dim": 128,
      "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26, 27, 29, 30, 31, 33, 34,
                     35, 37, 38, 39, 41, 42, 43, 45, 46, 47, 49, 50, 51, 53, 54, 55, 57, 58, 59, 61, 62, 63, 65, 66, 67,
                     69, 70, 71, 73, 74, 75, 77, 78, 79, 81, 82, 83, 85, 86, 87, 89, 90, 91],
      "num_heads": 96, "short_conv_kernel_size": 4, "use_full_rank_gate": true},
    "mla_use_nope": true, "mla_use_output_gate": true, "moe_intermediate_size": 3072, "moe_layer_freq": 1,
    "moe_renormalize": true, "moe_router_activation_func": "sigmoid", "num_attention_heads": 96,
    "num_expert_group": 1, "num_experts": 896, "num_experts_per_token": 16, "num_hidden_layers": 93,
    "num_key_value_heads": 96, "num_shared_experts": 2, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05, "routed_expert_hidden_size": 3584, "routed_scaling_factor": 1.0,
    "tie_word_embeddings": false, "topk_group": 1, "v_head_dim": 128, "vocab_size": 163840}
})";

TEST(KimiK3, TensorPlanOfThePublishedCheckpoint) {
  const ModelConfig cfg(nlohmann::json::parse(kPublishedK3), "Kimi-K3 config.json");
  const auto specs = kimi_k3_tensors(cfg);
  uint64_t numel = 0, expert_bytes = 0, spine_bytes = 0, experts = 0;
  for (const auto& t : specs) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    numel += n;
    const bool expert = t.name.find(".experts.") != std::string::npos;
    (expert ? expert_bytes : spine_bytes) += t.bytes();
    if (expert && t.name.ends_with(".w1.weight_packed")) ++experts;
  }
  EXPECT_EQ(specs.size(), 497220u - 168u);
  EXPECT_EQ(numel, 1503647073024ull - 447358976ull);
  EXPECT_EQ(experts, 92u * 896u);
  EXPECT_EQ(expert_bytes / experts, 17547264u);  // 3072 x 3584 MXFP4, three matrices
  EXPECT_EQ(expert_bytes, 1446456066048ull);     // the 1.45 TB of routed experts
  EXPECT_EQ(spine_bytes, 113509540864ull);
  // Touched per token: 16 experts in each of the 92 MoE layers.
  EXPECT_EQ(16u * 92u * (expert_bytes / experts), 25829572608ull);
}

}  // namespace deltafin
