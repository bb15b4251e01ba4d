// deltafin generate: prefill a prompt, then decode up to --max-tokens,
// streaming text (or one JSON object with tokens, text and measured stats).
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/common.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/parse.h"
#include "util/timer.h"

namespace deltafin::cli {

namespace {

// End-of-sequence ids from generation_config.json (int or list), else config.json.
std::vector<int32_t> eos_ids(const Checkpoint& ck) {
  std::vector<int32_t> ids;
  for (const nlohmann::json* j : {&ck.generation_config(), &ck.config().json()}) {
    auto it = j->find("eos_token_id");
    if (it == j->end()) continue;
    if (it->is_number_integer()) ids.push_back(it->get<int32_t>());
    if (it->is_array())
      for (const auto& v : *it)
        if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
    if (!ids.empty()) break;
  }
  return ids;
}

bool has_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tiktoken.model");
}

// Greedy at temperature 0 (ties to the lower id); otherwise a draw from
// softmax(logits / T) with a seeded generator (same seed, same tokens).
int32_t pick(const std::vector<float>& logits, double temperature, std::mt19937_64& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  int32_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  if (temperature <= 0) return best;
  std::vector<double> p(V);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += p[i] = std::exp((logits[i] - logits[best]) / temperature);
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * sum;
  for (int64_t i = 0; i < V; ++i) {
    u -= p[i];
    if (u < 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(V - 1);
}

}  // namespace

void register_generate(CLI::App& app) {
  struct Args {
    ModelArgs m;
    std::string prompt, prompt_tokens;
    int64_t max_tokens = 0, chunk = 512;
    double temperature = 0;
    uint64_t seed = 0;
    bool ignore_eos = false, json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "continue a prompt");
  add_model_options(cmd, a->m);
  auto* p1 = cmd->add_option("--prompt", a->prompt, "prompt text (needs the model's tokenizer)");
  auto* p2 = cmd->add_option("--prompt-tokens", a->prompt_tokens, "prompt as token ids, e.g. 1,2,3");
  p1->excludes(p2);
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate")->required()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--temperature", a->temperature, "0 = greedy (default)")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_option("--prefill-chunk", a->chunk, "rows per prefill block")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep going past end-of-sequence tokens");
  cmd->add_flag("--json", a->json, "print one JSON object: tokens, text, stats");
  cmd->callback([a] {
    if (a->prompt.empty() && a->prompt_tokens.empty()) fail("give --prompt TEXT or --prompt-tokens 1,2,3");
    LoadedModel lm = load(a->m);
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (has_tokenizer(a->m.model)) tok = tokenizer::Tokenizer::load(a->m.model);
    std::vector<int32_t> prompt;
    if (!a->prompt.empty()) {
      if (!tok) fail("{} has no tokenizer.json or tiktoken.model; use --prompt-tokens", a->m.model);
      prompt = tok->encode(a->prompt);
    } else {
      prompt = parse_token_list(a->prompt_tokens, "--prompt-tokens");
    }
    const int64_t V = lm.model->vocab();
    for (int32_t t : prompt)
      if (t >= V) fail("prompt token {} is outside the vocabulary (0 .. {})", t, V - 1);
    const std::vector<int32_t> eos = a->ignore_eos ? std::vector<int32_t>{} : eos_ids(*lm.ck);
    std::mt19937_64 rng(a->seed);
    Session s(*lm.model, a->chunk);
    std::vector<float> logits;
    Stopwatch total;
    s.prefill(prompt, nullptr, &logits);
    const double ttft = total.seconds();
    std::vector<int32_t> out;
    std::string text;
    std::unique_ptr<tokenizer::Tokenizer::StreamDecoder> sd;
    if (tok) sd = std::make_unique<tokenizer::Tokenizer::StreamDecoder>(*tok, /*skip_special=*/true);
    for (int64_t i = 0; i < a->max_tokens; ++i) {
      const int32_t t = pick(logits, a->temperature, rng);
      out.push_back(t);
      const bool stop = std::find(eos.begin(), eos.end(), t) != eos.end();
      std::string piece = sd ? sd->next(t) : fmt::format("{} ", t);
      text += piece;
      if (!a->json) {
        fmt::print("{}", piece);
        std::fflush(stdout);
      }
      if (stop || i + 1 == a->max_tokens) break;
      s.decode(t, logits);
    }
    if (sd) {
      std::string rest = sd->finish();
      text += rest;
      if (!a->json) fmt::print("{}", rest);
    }
    const SessionStats& st = s.stats();
    if (a->json) {
      nlohmann::json j = {{"tokens", out},
                          {"text", text},
                          {"prompt_tokens", prompt.size()},
                          {"stats",
                           {{"prefill_tokens", st.prefill_tokens},
                            {"prefill_tok_s", st.prefill_tok_s()},
                            {"decode_tokens", st.decode_tokens},
                            {"decode_tok_s", st.decode_tok_s()},
                            {"ttft_s", ttft},
                            {"threads", lm.pool->threads()}}}};
      fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("\n");
      fmt::print(stderr, "prompt {} tokens, {:.1f} tok/s prefill; {} tokens generated, {:.2f} tok/s decode; TTFT {:.3f} s\n",
                 st.prefill_tokens, st.prefill_tok_s(), out.size(), st.decode_tok_s(), ttft);
    }
  });
}

}  // namespace deltafin::cli
