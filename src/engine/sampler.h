// Choosing the next token from logits, and deciding when generation stops.
//
// Sampler order (as Hugging Face generate): logit bias -> repetition /
// presence / frequency penalties -> greedy argmax when temperature is 0, else
// temperature -> top-k -> top-p -> min-p -> one draw. Draws come from
// std::mt19937_64 with our own uniform conversion, so a seed gives the same
// tokens on every platform and standard library.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deltafin::engine {

struct SamplingParams {
  float temperature = 1.0f;          // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 0;                     // 0: off
  float top_p = 1.0f;                // 1: off
  float min_p = 0.0f;                // 0: off; keeps p >= min_p * max p
  float repetition_penalty = 1.0f;   // HF: seen tokens' logit l -> l > 0 ? l / r : l * r
  float presence_penalty = 0.0f;     // OpenAI: l -= presence if the token was seen
  float frequency_penalty = 0.0f;    // OpenAI: l -= frequency * times seen
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits first
  uint64_t seed = 0;

  // Defaults a model ships in generation_config.json (do_sample,
  // temperature, top_k, top_p, min_p, repetition_penalty) over `base`;
  // `base` unchanged when the file is absent. Throws Error on bad JSON.
  static SamplingParams from_generation_config(const std::filesystem::path& model_dir, SamplingParams base);
  static SamplingParams from_generation_config(const std::filesystem::path& model_dir);
  // Throws Error naming the first out-of-range field.
  void validate(int32_t vocab_size) const;
};

class Sampler {
 public:
  // REQUIRES: params.validate(vocab_size) passes.
  Sampler(SamplingParams params, int32_t vocab_size);

  // Counts `token` for the penalties (call for prompt tokens that should
  // count, and for every generated token).
  void accept(int32_t token);
  void accept(std::span<const int32_t> tokens) {
    for (int32_t t : tokens) accept(t);
  }
  // The next token for `logits` [vocab_size]. Does not call accept().
  int32_t sample(std::span<const float> logits);
  // Forgets the counted tokens and restarts the random stream from the seed.
  void reset();

  const SamplingParams& params() const { return p_; }

 private:
  double uniform();  // [0, 1) with 53 random bits

  SamplingParams p_;
  int32_t vocab_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> counts_;
  std::vector<float> work_;
  std::vector<int32_t> order_;
};

// Token ids that end generation: generation_config.json's eos_token_id (an
// int or a list); empty when the file or field is absent.
std::vector<int32_t> eos_token_ids(const std::filesystem::path& model_dir);

// Stop strings over streamed text: holds back text that might be the start
// of a stop string, so that a stop string is never shown to the user.
class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  struct Step {
    std::string text;  // safe to show now
    bool stopped = false;  // a stop string was found; `text` ends right before it
  };
  // Adds `text` (decoded output); after a stop, further calls return nothing.
  Step push(std::string_view text);
  // The held-back text at the end of generation (no stop string in it).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace deltafin::engine
