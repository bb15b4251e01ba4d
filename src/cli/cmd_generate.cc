// deltafin generate: prefill a prompt, then decode up to --max-tokens,
// streaming text (or one JSON object with tokens, text and measured stats).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/chat_io.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/parse.h"
#include "util/timer.h"

namespace deltafin::cli {

namespace {

bool has_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tiktoken.model");
}

}  // namespace

void register_generate(CLI::App& app) {
  struct Args {
    ModelArgs m;
    std::string prompt, prompt_tokens;
    std::vector<std::string> stop;
    int64_t max_tokens = 0, chunk = 512;
    std::optional<double> temperature, top_p, min_p, repetition_penalty;
    std::optional<int> top_k;
    double presence_penalty = 0, frequency_penalty = 0;
    uint64_t seed = 0;
    bool ignore_eos = false, json = false, chat = false;
    std::string system;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "continue a prompt");
  add_model_options(cmd, a->m);
  auto* p1 = cmd->add_option("--prompt", a->prompt, "prompt text (needs the model's tokenizer)");
  auto* p2 = cmd->add_option("--prompt-tokens", a->prompt_tokens, "prompt as token ids, e.g. 1,2,3");
  p1->excludes(p2);
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate")->required()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--temperature", a->temperature, "0 = greedy (default: generation_config.json, else 0)");
  cmd->add_option("--top-k", a->top_k, "keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", a->top_p, "nucleus sampling threshold (1: off)");
  cmd->add_option("--min-p", a->min_p, "drop tokens below min-p x the top probability (0: off)");
  cmd->add_option("--repetition-penalty", a->repetition_penalty, "HF repetition penalty (1: off)");
  cmd->add_option("--presence-penalty", a->presence_penalty, "OpenAI presence penalty");
  cmd->add_option("--frequency-penalty", a->frequency_penalty, "OpenAI frequency penalty");
  cmd->add_option("--stop", a->stop, "stop string (repeatable)");
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_option("--prefill-chunk", a->chunk, "rows per prefill block")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep going past end-of-sequence tokens");
  cmd->add_flag("--chat", a->chat, "send --prompt as a user message through the model's chat template");
  cmd->add_option("--system", a->system, "with --chat: a system message first");
  cmd->add_flag("--json", a->json, "print one JSON object: tokens, text, stats");
  cmd->callback([a] {
    if (a->prompt.empty() && a->prompt_tokens.empty()) fail("give --prompt TEXT or --prompt-tokens 1,2,3");
    auto rt = load(a->m);
    const std::filesystem::path dir = rt->checkpoint().dir();
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (has_tokenizer(dir)) tok = tokenizer::Tokenizer::load(dir);
    std::vector<int32_t> prompt;
    if (a->chat && a->prompt.empty()) fail("--chat needs --prompt TEXT");
    if (!a->prompt.empty()) {
      if (!tok) fail("{} has no tokenizer.json or tiktoken.model; use --prompt-tokens", dir.string());
      if (a->chat) {
        nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
        if (!a->system.empty()) msgs.push_back({{"role", "system"}, {"content", a->system}});
        msgs.push_back({{"role", "user"}, {"content", a->prompt}});
        prompt = tok->encode(require_chat_template(dir).render(msgs, /*add_generation_prompt=*/true));
      } else {
        prompt = tok->encode_with_specials(a->prompt);  // as transformers' tokenizer(text)
      }
    } else {
      prompt = parse_token_list(a->prompt_tokens, "--prompt-tokens");
    }
    const int64_t V = rt->model().vocab();
    for (int32_t t : prompt)
      if (t >= V) fail("prompt token {} is outside the vocabulary (0 .. {})", t, V - 1);
    const int64_t ctx = rt->model().max_context();
    if (ctx > 0 && static_cast<int64_t>(prompt.size()) > ctx)
      fail("the prompt has {} tokens, more than --ctx-size {}; raise --ctx-size", prompt.size(), ctx);
    // Sampling: the model's generation_config.json defaults, then the flags.
    engine::SamplingParams base;
    base.temperature = 0;
    engine::SamplingParams sp = engine::SamplingParams::from_generation_config(dir, base);
    if (a->temperature) sp.temperature = static_cast<float>(*a->temperature);
    if (a->top_k) sp.top_k = *a->top_k;
    if (a->top_p) sp.top_p = static_cast<float>(*a->top_p);
    if (a->min_p) sp.min_p = static_cast<float>(*a->min_p);
    if (a->repetition_penalty) sp.repetition_penalty = static_cast<float>(*a->repetition_penalty);
    sp.presence_penalty = static_cast<float>(a->presence_penalty);
    sp.frequency_penalty = static_cast<float>(a->frequency_penalty);
    sp.seed = a->seed;
    sp.validate(static_cast<int32_t>(V));
    engine::Sampler sampler(sp, static_cast<int32_t>(V));
    sampler.accept(prompt);
    std::vector<int32_t> eos;
    if (!a->ignore_eos) eos = a->chat ? end_of_turn_ids(dir, *tok) : engine::eos_token_ids(dir);
    engine::StopStrings stops(a->stop);
    Session s(rt->model(), a->chunk);
    std::vector<float> logits;
    Stopwatch total;
    s.prefill(prompt, nullptr, &logits);
    const double ttft = total.seconds();
    std::optional<residency::StreamStats> at_first_token;
    if (rt->stream_stats()) at_first_token = *rt->stream_stats();
    std::vector<int32_t> out;
    std::string text;
    std::unique_ptr<tokenizer::Tokenizer::StreamDecoder> sd;
    if (tok) sd = std::make_unique<tokenizer::Tokenizer::StreamDecoder>(*tok, /*skip_special=*/true);
    std::string finish = "length";
    auto emit = [&](const std::string& piece) {
      text += piece;
      if (!a->json) {
        fmt::print("{}", piece);
        std::fflush(stdout);
      }
    };
    for (int64_t i = 0; i < a->max_tokens; ++i) {
      const int32_t t = sampler.sample(logits);
      sampler.accept(t);
      out.push_back(t);
      if (std::find(eos.begin(), eos.end(), t) != eos.end()) {
        finish = "eos";
        break;
      }
      auto step = stops.push(sd ? sd->next(t) : fmt::format("{} ", t));
      emit(step.text);
      if (step.stopped) {
        finish = "stop";
        break;
      }
      if (i + 1 == a->max_tokens) break;
      if (ctx > 0 && s.length() >= ctx) {  // the context is full: stop as at --max-tokens
        fmt::print(stderr, "\nstopped: the sequence filled --ctx-size {} tokens\n", ctx);
        break;
      }
      s.decode(t, logits);
    }
    if (finish != "stop") {
      auto step = stops.push(sd ? sd->finish() : std::string());
      emit(step.text);
      if (!step.stopped) emit(stops.flush());
    }
    const SessionStats& st = s.stats();
    if (a->json) {
      nlohmann::json j = {{"tokens", out},
                          {"text", text},
                          {"finish_reason", finish},
                          {"prompt_tokens", prompt.size()},
                          {"stats",
                           {{"prefill_tokens", st.prefill_tokens},
                            {"prefill_tok_s", st.prefill_tok_s()},
                            {"decode_tokens", st.decode_tokens},
                            {"decode_tok_s", st.decode_tok_s()},
                            {"ttft_s", ttft},
                            {"threads", rt->pool().threads()}}}};
      fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("\n");
      fmt::print(stderr, "prompt {} tokens, {:.1f} tok/s prefill; {} tokens generated, {:.2f} tok/s decode; TTFT {:.3f} s\n",
                 st.prefill_tokens, st.prefill_tok_s(), out.size(), st.decode_tok_s(), ttft);
    }
    report_stats(a->m, *rt, st, ttft, at_first_token ? &*at_first_token : nullptr);
  });
}

}  // namespace deltafin::cli
