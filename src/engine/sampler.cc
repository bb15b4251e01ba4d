#include "engine/sampler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "util/error.h"

namespace deltafin::engine {

namespace {
nlohmann::json read_generation_config(const std::filesystem::path& dir, bool& found) {
  auto p = dir / "generation_config.json";
  found = std::filesystem::exists(p);
  if (!found) return nlohmann::json::object();
  std::ifstream f(p);
  if (!f) fail("{}: cannot read the file", p.string());
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: not valid JSON ({}); fix or remove the file", p.string(), e.what());
  }
}
}  // namespace

SamplingParams SamplingParams::from_generation_config(const std::filesystem::path& dir, SamplingParams p) {
  bool found;
  auto j = read_generation_config(dir, found);
  if (!found) return p;
  try {
    if (j.contains("temperature") && j["temperature"].is_number()) p.temperature = j["temperature"].get<float>();
    if (j.contains("top_k") && j["top_k"].is_number()) p.top_k = j["top_k"].get<int>();
    if (j.contains("top_p") && j["top_p"].is_number()) p.top_p = j["top_p"].get<float>();
    if (j.contains("min_p") && j["min_p"].is_number()) p.min_p = j["min_p"].get<float>();
    if (j.contains("repetition_penalty") && j["repetition_penalty"].is_number())
      p.repetition_penalty = j["repetition_penalty"].get<float>();
    if (j.contains("do_sample") && j["do_sample"].is_boolean() && !j["do_sample"].get<bool>()) p.temperature = 0;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected field type ({})", (dir / "generation_config.json").string(), e.what());
  }
  return p;
}

SamplingParams SamplingParams::from_generation_config(const std::filesystem::path& dir) {
  return from_generation_config(dir, SamplingParams{});
}

void SamplingParams::validate(int32_t vocab_size) const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) fail("--temperature must be >= 0 (got {})", temperature);
  if (top_k < 0) fail("--top-k must be >= 0 (got {})", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("--top-p must be in (0, 1] (got {})", top_p);
  if (!(min_p >= 0 && min_p <= 1)) fail("--min-p must be in [0, 1] (got {})", min_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    fail("--repetition-penalty must be > 0 (got {})", repetition_penalty);
  if (!std::isfinite(presence_penalty)) fail("--presence-penalty must be finite");
  if (!std::isfinite(frequency_penalty)) fail("--frequency-penalty must be finite");
  for (auto [id, b] : logit_bias) {
    if (id < 0 || id >= vocab_size) fail("logit bias for token {} is outside the vocabulary (0..{})", id, vocab_size - 1);
    if (std::isnan(b)) fail("logit bias for token {} is NaN", id);
  }
}

Sampler::Sampler(SamplingParams params, int32_t vocab_size)
    : p_(std::move(params)), vocab_(vocab_size), rng_(p_.seed) {
  DF_CHECK(vocab_size > 0);
}

void Sampler::accept(int32_t token) { ++counts_[token]; }

void Sampler::reset() {
  counts_.clear();
  rng_.seed(p_.seed);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<const float> logits) {
  DF_CHECK(static_cast<int32_t>(logits.size()) == vocab_);
  work_.assign(logits.begin(), logits.end());
  float* l = work_.data();
  for (auto [id, b] : p_.logit_bias) l[id] += b;
  for (auto [id, n] : counts_) {
    if (id < 0 || id >= vocab_) continue;
    if (p_.repetition_penalty != 1.0f) l[id] = l[id] > 0 ? l[id] / p_.repetition_penalty : l[id] * p_.repetition_penalty;
    if (p_.presence_penalty != 0.0f) l[id] -= p_.presence_penalty;
    if (p_.frequency_penalty != 0.0f) l[id] -= p_.frequency_penalty * static_cast<float>(n);
  }
  if (p_.temperature <= 0 || p_.top_k == 1) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab_; ++i)
      if (l[i] > l[best]) best = i;
    return best;
  }
  // Candidates by logit, descending; ties keep the lower id first.
  order_.resize(static_cast<size_t>(vocab_));
  for (int32_t i = 0; i < vocab_; ++i) order_[static_cast<size_t>(i)] = i;
  auto by_logit = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  size_t n = order_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::partial_sort(order_.begin(), order_.begin() + p_.top_k, order_.end(), by_logit);
    n = static_cast<size_t>(p_.top_k);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  // Softmax of logit / temperature over the candidates, in double, summed in rank order.
  std::vector<double> prob(n);
  const double inv_t = 1.0 / static_cast<double>(p_.temperature);
  const double top = static_cast<double>(l[order_[0]]) * inv_t;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp(static_cast<double>(l[order_[i]]) * inv_t - top);
    sum += prob[i];
  }
  for (auto& p : prob) p /= sum;
  // top-p: the smallest prefix whose mass reaches top_p.
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i];
      if (cum >= static_cast<double>(p_.top_p)) { keep = i + 1; break; }
    }
    n = keep;
  }
  // min-p: relative to the most likely token.
  if (p_.min_p > 0.0f) {
    double floor = prob[0] * static_cast<double>(p_.min_p);
    size_t keep = 1;
    while (keep < n && prob[keep] >= floor) ++keep;
    n = keep;
  }
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += prob[i];
  double u = uniform() * mass, cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += prob[i];
    if (u < cum) return order_[i];
  }
  return order_[n - 1];
}

std::vector<int32_t> eos_token_ids(const std::filesystem::path& dir) {
  bool found;
  auto j = read_generation_config(dir, found);
  std::vector<int32_t> ids;
  if (!found || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return ids;
  const auto& e = j["eos_token_id"];
  auto bad = [&]() {
    fail("{}: eos_token_id must be an integer or a list of integers", (dir / "generation_config.json").string());
  };
  if (e.is_number_integer()) {
    ids.push_back(e.get<int32_t>());
  } else if (e.is_array()) {
    for (const auto& x : e) {
      if (!x.is_number_integer()) bad();
      ids.push_back(x.get<int32_t>());
    }
  } else {
    bad();
  }
  return ids;
}

StopStrings::Step StopStrings::push(std::string_view text) {
  Step s;
  if (stopped_) return s;
  pending_.append(text);
  // The earliest complete stop string wins.
  size_t at = std::string::npos;
  for (const auto& st : stops_) {
    if (st.empty()) continue;
    size_t k = pending_.find(st);
    if (k != std::string::npos && k < at) at = k;
  }
  if (at != std::string::npos) {
    s.text = pending_.substr(0, at);
    s.stopped = stopped_ = true;
    pending_.clear();
    return s;
  }
  // Hold back the longest tail that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const auto& st : stops_) {
    for (size_t len = std::min(st.size() - (st.empty() ? 0 : 1), pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, st, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  s.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return s;
}

std::string StopStrings::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? std::string() : out;
}

}  // namespace deltafin::engine
