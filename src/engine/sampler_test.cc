#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace deltafin::engine {
namespace {

std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<double> frequencies(Sampler& s, const std::vector<float>& l, int n) {
  std::vector<double> f(l.size());
  for (int i = 0; i < n; ++i) f[static_cast<size_t>(s.sample(l))] += 1.0 / n;
  return f;
}

TEST(Sampler, GreedyTakesArgmaxAndLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, 4);
  EXPECT_EQ(s.sample(std::vector<float>{0, 3, 1, 3}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-5, -1, -2, -9}), 1);
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  SamplingParams p;
  p.seed = 42;
  Sampler s(p, 4);
  auto f = frequencies(s, logits_for({0.5, 0.3, 0.15, 0.05}), 40000);
  EXPECT_NEAR(f[0], 0.5, 0.01);
  EXPECT_NEAR(f[1], 0.3, 0.01);
  EXPECT_NEAR(f[2], 0.15, 0.01);
  EXPECT_NEAR(f[3], 0.05, 0.01);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  auto l = logits_for({0.25, 0.25, 0.25, 0.25});
  SamplingParams p;
  p.seed = 7;
  Sampler a(p, 4), b(p, 4);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 64; ++i) { ta.push_back(a.sample(l)); tb.push_back(b.sample(l)); }
  EXPECT_EQ(ta, tb);
  a.reset();
  std::vector<int32_t> tc;
  for (int i = 0; i < 64; ++i) tc.push_back(a.sample(l));
  EXPECT_EQ(ta, tc);
  p.seed = 8;
  Sampler c(p, 4);
  std::vector<int32_t> td;
  for (int i = 0; i < 64; ++i) td.push_back(c.sample(l));
  EXPECT_NE(ta, td);
}

TEST(Sampler, TopKTopPMinPCutTheTail) {
  auto l = logits_for({0.5, 0.3, 0.15, 0.05});
  SamplingParams p;
  p.top_k = 2;
  Sampler k2(p, 4);
  auto f = frequencies(k2, l, 20000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 0.5 / 0.8, 0.015);
  p = {};
  p.top_p = 0.85f;  // 0.5 + 0.3 < 0.85 <= 0.95: three tokens stay
  Sampler tp(p, 4);
  f = frequencies(tp, l, 20000);
  EXPECT_EQ(f[3], 0.0);
  EXPECT_GT(f[2], 0.1);
  p = {};
  p.min_p = 0.5f;  // keeps p >= 0.25
  Sampler mp(p, 4);
  f = frequencies(mp, l, 20000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_GT(f[1], 0.3);
}

TEST(Sampler, LowTemperatureSharpens) {
  auto l = logits_for({0.6, 0.4});
  SamplingParams p;
  p.temperature = 0.25f;  // 0.6^4 : 0.4^4 = 0.835 : 0.165
  Sampler s(p, 2);
  auto f = frequencies(s, l, 20000);
  EXPECT_NEAR(f[0], 0.835, 0.015);
}

TEST(Sampler, PenaltiesAndBias) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p, 3);
  s.accept(0);
  // token 0: 3 -> 1.5 < 2; a negative logit is multiplied.
  EXPECT_EQ(s.sample(std::vector<float>{3, 2, 0}), 1);
  p = {};
  p.temperature = 0;
  p.frequency_penalty = 1.0f;
  Sampler fq(p, 3);
  fq.accept(std::vector<int32_t>{0, 0});
  EXPECT_EQ(fq.sample(std::vector<float>{3, 1.5f, 0}), 1);  // 3 - 2 = 1 < 1.5
  p.frequency_penalty = 0;
  p.presence_penalty = 1.0f;
  Sampler pr(p, 3);
  pr.accept(std::vector<int32_t>{0, 0});
  EXPECT_EQ(pr.sample(std::vector<float>{3, 1.5f, 0}), 0);  // 3 - 1 = 2 > 1.5
  p = {};
  p.temperature = 0;
  p.logit_bias = {{2, 100.0f}};
  Sampler b(p, 3);
  EXPECT_EQ(b.sample(std::vector<float>{3, 2, 0}), 2);
}

TEST(Sampler, ValidateRejectsBadValues) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_THROW(p.validate(10), Error);
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_THROW(p.validate(10), Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(p.validate(10), Error);
  EXPECT_NO_THROW(SamplingParams{}.validate(10));
}

TEST(Sampler, GenerationConfig) {
  auto dir = std::filesystem::temp_directory_path() / "deltafin_sampler_test";
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(eos_token_ids(dir).empty());
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [1, 106], "temperature": 0.6, "top_p": 0.95, "top_k": 20})";
  EXPECT_EQ(eos_token_ids(dir), (std::vector<int32_t>{1, 106}));
  auto p = SamplingParams::from_generation_config(dir);
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.top_k, 20);
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 2, "do_sample": false})";
  EXPECT_EQ(eos_token_ids(dir), (std::vector<int32_t>{2}));
  EXPECT_EQ(SamplingParams::from_generation_config(dir).temperature, 0.0f);
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": "x"})";
  EXPECT_THROW(eos_token_ids(dir), Error);
  std::ofstream(dir / "generation_config.json") << "{not json";
  EXPECT_THROW(eos_token_ids(dir), Error);
  std::filesystem::remove_all(dir);
}

TEST(StopStrings, HoldsBackPartialMatchesAndCutsAtTheStop) {
  StopStrings s({"</answer>", "STOP"});
  std::string shown;
  auto st = s.push("The result is 4</");
  shown += st.text;
  EXPECT_FALSE(st.stopped);
  EXPECT_EQ(shown, "The result is 4");  // "</" might start "</answer>"
  st = s.push("ans");
  shown += st.text;
  EXPECT_EQ(shown, "The result is 4");
  st = s.push("wer> and more");
  shown += st.text;
  EXPECT_TRUE(st.stopped);
  EXPECT_EQ(shown, "The result is 4");
  EXPECT_EQ(s.push("x").text, "");

  StopStrings t({"STOP"});
  std::string out = t.push("a S").text;
  out += t.push("T then").text;  // "ST then" is no stop: released
  out += t.flush();
  EXPECT_EQ(out, "a ST then");
}

}  // namespace
}  // namespace deltafin::engine
