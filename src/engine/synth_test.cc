// deltafin synth: every architecture and encoding writes a checkpoint that
// loads, scores with finite logits, and streams through a packed store bit
// for bit; seeded output; --size-gb; Kimi K3's real expert size; errors.
#include "engine/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/pack.h"
#include "engine/runtime.h"
#include "engine/session.h"
#include "format/checkpoint.h"
#include "model/architectures.h"
#include "model/model.h"
#include "util/error.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("deltafin_synth_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

// A tiny model of `arch`: small widths everywhere (via --set where no flag exists).
SynthOptions tiny(const std::string& arch, const std::string& enc, const fs::path& out) {
  SynthOptions o;
  o.arch = arch;
  o.encoding = enc;
  o.out_dir = out.string();
  o.layers = arch == "kimi_k3" ? 4 : 3;
  o.experts = 8;
  o.top_k = 2;
  o.hidden = 64;
  o.heads = 4;
  o.vocab = 160;
  o.inter = 96;
  o.moe_inter = 64;
  o.progress = false;
  o.shard_bytes = 128 << 10;  // several shards + index even for tiny models
  const std::string t = arch == "kimi_k3" ? "text_config." : "";
  if (arch == "mixtral") o.moe_inter = 0, o.inter = 64;
  if (arch == "deepseek_v3" || arch == "kimi_linear" || arch == "kimi_k3")
    for (const char* k : {"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"})
      o.set.push_back({t + k, 16});
  if (arch == "deepseek_v3" || arch == "kimi_k3") o.set.push_back({t + "q_lora_rank", 32});
  if (arch == "qwen3_moe") o.set.push_back({"head_dim", 16});
  if (arch == "kimi_linear" || arch == "kimi_k3") o.set.push_back({t + "linear_attn_config.head_dim", 16});
  if (arch == "kimi_k3") {
    o.latent = 32;
    o.set.push_back({t + "attn_res_block_size", 2});
  }
  return o;
}

std::vector<float> score(Runtime& rt, const std::vector<int32_t>& toks) {
  Session s(rt.model(), 4);
  std::vector<float> out(toks.size() * rt.model().vocab());
  s.prefill(toks, out.data(), nullptr);
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Synth, EveryArchitectureAndEncodingLoadsScoresFiniteAndStreamsBitIdentical) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"deepseek_v3", {"bf16", "fp8", "int4", "mxfp4"}},
      {"qwen3_moe", {"bf16", "fp8", "int4", "mxfp4"}},
      {"mixtral", {"bf16", "fp8", "int4", "mxfp4"}},
      {"kimi_linear", {"bf16", "fp8", "int4", "mxfp4"}},
      {"kimi_k3", {"mxfp4"}}};
  const std::vector<int32_t> toks = {0, 5, 17, 99, 3, 42, 7, 150, 8, 1, 64};
  for (const auto& [arch, encs] : cases)
    for (const auto& enc : encs) {
      SCOPED_TRACE(arch + " " + enc);
      const fs::path dir = scratch(arch + "_" + enc);
      const fs::path model = dir / "model";
      const SynthResult r = synth_checkpoint(tiny(arch, enc, model));
      EXPECT_GT(r.shards, 1u);
      EXPECT_TRUE(fs::exists(model / "model.safetensors.index.json"));
      auto ck = Checkpoint::open(model);
      // The experts are in the asked encoding.
      const std::string e0 = arch == "kimi_k3" ? "language_model.model.layers.1.block_sparse_moe.experts.0.w1"
                             : arch == "mixtral" || arch == "kimi_linear" ? "model.layers.1.block_sparse_moe.experts.0.w1"
                                                                          : "model.layers.1.mlp.experts.0.gate_proj";
      const char* want_tensor = enc == "bf16" || enc == "fp8" ? ".weight" : ".weight_packed";
      ASSERT_NE(ck->find(e0 + want_tensor), nullptr);
      if (enc == "fp8") {
        EXPECT_EQ(ck->find(e0 + ".weight")->dtype, DType::F8_E4M3);
      }

      RuntimeOptions ro;
      ro.threads = 2;
      ro.context = 64;  // the budget below holds its KV cache
      auto resident = Runtime::open(model.string(), ro);
      const std::vector<float> want = score(*resident, toks);
      float amax = 0;
      for (float v : want) {
        ASSERT_TRUE(std::isfinite(v));
        amax = std::max(amax, std::fabs(v));
      }
      EXPECT_GT(amax, 0.0f);
      resident.reset();

      PackOptions po;
      po.model_dir = model.string();
      po.out_dir = (dir / "store").string();
      po.drives = {(dir / "d0").string(), (dir / "d1").string()};
      po.progress = false;
      pack_store(po);
      uint64_t budget = 0;
      {
        auto probe = Runtime::open(po.out_dir, ro);
        const BudgetPlan& b = probe->budget();
        budget = b.spine + b.overhead + b.sequence_bytes + 3 * b.slot_bytes;  // 3 slots: nearly every expert is read
      }
      ro.ram_budget = budget;
      ro.update_heat = false;
      auto streamed = Runtime::open(po.out_dir, ro);
      const std::vector<float> got = score(*streamed, toks);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "streamed logits differ";
      EXPECT_GT(streamed->stream_stats()->records_read, 0u);
      streamed.reset();
      fs::remove_all(dir);
    }
}

TEST(Synth, SeededOutputIsReproducibleAndSeedsDiffer) {
  const fs::path dir = scratch("seed");
  SynthOptions o = tiny("deepseek_v3", "fp8", dir / "a");
  o.shard_bytes = 4ull << 30;
  synth_checkpoint(o);
  o.out_dir = (dir / "b").string();
  synth_checkpoint(o);
  o.out_dir = (dir / "c").string();
  o.seed = 2;
  synth_checkpoint(o);
  const std::string a = slurp(dir / "a" / "model.safetensors");
  EXPECT_FALSE(fs::exists(dir / "a" / "model.safetensors.index.json"));
  EXPECT_GT(a.size(), 100000u);
  EXPECT_EQ(a, slurp(dir / "b" / "model.safetensors"));
  EXPECT_NE(a, slurp(dir / "c" / "model.safetensors"));
  // FP8 codes never hit the NaN codes 0x7f / 0xff.
  auto ck = Checkpoint::open(dir / "a");
  int fp8_tensors = 0;
  for (const auto& [name, t] : ck->all_tensors()) {
    if (t->dtype != DType::F8_E4M3) continue;
    ++fp8_tensors;
    for (uint64_t i = 0; i < t->bytes; ++i) {
      ASSERT_NE(t->data[i] & 0x7f, 0x7f) << name;
    }
  }
  EXPECT_GT(fp8_tensors, 0);
  fs::remove_all(dir);
}

TEST(Synth, SizeGbPicksTheMostLayersThatFit) {
  SynthOptions o = tiny("qwen3_moe", "bf16", "/nonexistent");
  o.layers = 0;
  const uint64_t b3 = synth_bytes(o, 3), b4 = synth_bytes(o, 4);
  ASSERT_LT(b3, b4);
  o.size_gb = static_cast<double>(b3 + (b4 - b3) / 2) / 1e9;
  EXPECT_EQ(synth_layers(o), 3);
  o.size_gb = static_cast<double>(b4) / 1e9;
  EXPECT_EQ(synth_layers(o), 4);
  o.size_gb = 1e-6;
  EXPECT_THROW(synth_layers(o), Error);
  o.layers = 2;
  EXPECT_THROW(synth_layers(o), Error);  // both given
}

TEST(Synth, KimiK3DefaultsHaveTheRealExpertSize) {
  SynthOptions o;
  o.arch = "kimi_k3";
  const auto plan = published_tensors(ModelConfig(synth_config(o, 2), "k3"));
  uint64_t expert0 = 0;
  for (const auto& t : plan)
    if (t.name.find("layers.1.block_sparse_moe.experts.0.") != std::string::npos) expert0 += t.bytes();
  EXPECT_EQ(expert0, 17547264u);
  // Written and loaded: what `deltafin inspect` reports (small spine, real experts).
  const fs::path dir = scratch("k3_real_experts");
  SynthOptions w = tiny("kimi_k3", "mxfp4", dir);
  w.latent = 0;
  w.moe_inter = 0;
  w.layers = 2;
  w.experts = 2;
  w.top_k = 1;
  w.shard_bytes = 4ull << 30;
  synth_checkpoint(w);
  auto ck = Checkpoint::open(dir);
  auto m = load_model(*ck, ModelOptions{});
  EXPECT_EQ(m->summary().bytes_per_expert, 17547264u);
  EXPECT_EQ(m->summary().expert_bytes, 2u * 17547264u);
  fs::remove_all(dir);
}

TEST(Synth, ClearErrors) {
  const fs::path dir = scratch("errors");
  SynthOptions o = tiny("kimi_k3", "fp8", dir);
  EXPECT_THROW(synth_checkpoint(o), Error);  // K3 publishes mxfp4 experts only
  o = tiny("gpt2", "bf16", dir);
  EXPECT_THROW(synth_checkpoint(o), Error);
  o = tiny("mixtral", "int3", dir);
  EXPECT_THROW(synth_checkpoint(o), Error);
  o = tiny("mixtral", "bf16", dir);
  o.top_k = 9;
  EXPECT_THROW(synth_checkpoint(o), Error);
  o.top_k = 2;
  synth_checkpoint(o);
  EXPECT_THROW(synth_checkpoint(o), Error);  // already holds a checkpoint
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltafin
