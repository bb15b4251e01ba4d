// deltafin chat: an interactive terminal chat over the model's chat template.
// History is kept; each turn prefills only what the model has not seen yet;
// answers stream as they are generated. /reset, /stats, /exit; Ctrl-C stops
// the current answer (and, at the prompt, leaves).
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/chat_io.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "engine/sampler.h"
#include "util/error.h"
#include "util/timer.h"

namespace deltafin::cli {

namespace {

std::atomic<bool> g_generating{false};
std::atomic<bool> g_stop{false};

void on_sigint(int) {
  if (g_generating.load()) {
    g_stop.store(true);
  } else {
    const char msg[] = "\n";
    (void)!write(STDOUT_FILENO, msg, 1);
    _exit(130);
  }
}

}  // namespace

void register_chat(CLI::App& app) {
  struct Args {
    ModelArgs m;
    std::string system;
    int64_t max_tokens = 512;
    std::optional<double> temperature;
    uint64_t seed = 0;
    bool ignore_eos = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat in the terminal (/reset, /stats, /exit)");
  add_model_options(cmd, a->m);
  cmd->add_option("--system", a->system, "system prompt");
  cmd->add_option("--max-tokens", a->max_tokens, "longest answer in tokens")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--temperature", a->temperature, "0 = greedy (default: generation_config.json)");
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "answers end only at --max-tokens or Ctrl-C");
  cmd->callback([a] {
    auto rt = load(a->m);
    const std::filesystem::path dir = rt->checkpoint().dir();
    auto tok = tokenizer::Tokenizer::load(dir);
    const tokenizer::ChatTemplate tmpl = require_chat_template(dir);
    const int32_t V = static_cast<int32_t>(rt->model().vocab());
    engine::SamplingParams sp = engine::SamplingParams::from_generation_config(dir);
    if (a->temperature) sp.temperature = static_cast<float>(*a->temperature);
    sp.seed = a->seed;
    sp.validate(V);
    engine::Sampler sampler(sp, V);
    const std::vector<int32_t> stop_ids = a->ignore_eos ? std::vector<int32_t>{} : end_of_turn_ids(dir, *tok);
    nlohmann::ordered_json history = nlohmann::ordered_json::array();
    if (!a->system.empty()) history.push_back({{"role", "system"}, {"content", a->system}});
    const nlohmann::ordered_json initial = history;
    std::unique_ptr<Session> session;
    std::vector<int32_t> seen;  // tokens the session has processed
    SessionStats last{};
    double last_ttft = 0;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    const bool tty = isatty(STDIN_FILENO);
    if (tty) fmt::print("deltafin chat: {} ({}). /reset, /stats, /exit; Ctrl-C stops an answer.\n",
                        dir.string(), rt->model().summary().arch);
    std::string line;
    for (;;) {
      if (tty) fmt::print("> ");
      std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
      if (line.empty()) continue;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        history = initial;
        session.reset();
        seen.clear();
        fmt::print("(history cleared)\n");
        continue;
      }
      if (line == "/stats") {
        fmt::print("last answer: prompt {} tokens at {:.1f} tok/s, {} tokens at {:.2f} tok/s, TTFT {:.3f} s\n",
                   last.prefill_tokens, last.prefill_tok_s(), last.decode_tokens, last.decode_tok_s(), last_ttft);
        ModelArgs show;
        show.model = a->m.model;
        show.stats = true;
        report_stats(show, *rt, last, last_ttft);
        continue;
      }
      if (line[0] == '/') {
        fmt::print("unknown command {}; use /reset, /stats or /exit\n", line);
        continue;
      }
      history.push_back({{"role", "user"}, {"content", line}});
      const std::vector<int32_t> prompt = tok->encode(tmpl.render(history, /*add_generation_prompt=*/true));
      const int64_t ctx = rt->model().max_context();
      if (ctx > 0 && static_cast<int64_t>(prompt.size()) >= ctx) {
        fmt::print("the conversation would take {} tokens, and --ctx-size is {}: /reset to start again, or "
                   "restart with a larger --ctx-size\n", prompt.size(), ctx);
        history.erase(history.size() - 1);
        continue;
      }
      // Reuse what the session already holds when it is a prefix of the new prompt.
      bool prefix = session && seen.size() <= prompt.size() && std::equal(seen.begin(), seen.end(), prompt.begin());
      if (!prefix) {
        session = std::make_unique<Session>(rt->model(), 512);
        seen.clear();
      }
      const SessionStats before = session->stats();
      std::vector<float> logits;
      Stopwatch sw;
      std::span<const int32_t> fresh(prompt.data() + seen.size(), prompt.size() - seen.size());
      if (fresh.empty()) fresh = std::span<const int32_t>(prompt.data() + prompt.size() - 1, 1);
      session->prefill(fresh, nullptr, &logits);
      seen = prompt;
      last_ttft = sw.seconds();
      tokenizer::Tokenizer::StreamDecoder sd(*tok, /*skip_special=*/true);
      std::string answer;
      g_stop = false;
      g_generating = true;
      bool full = false;
      for (int64_t i = 0; i < a->max_tokens && !g_stop; ++i) {
        if (ctx > 0 && session->length() >= ctx) {
          full = true;
          break;
        }
        const int32_t t = sampler.sample(logits);
        sampler.accept(t);
        if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) break;
        const std::string piece = sd.next(t);
        answer += piece;
        fmt::print("{}", piece);
        std::fflush(stdout);
        session->decode(t, logits);
        seen.push_back(t);
      }
      g_generating = false;
      const std::string rest = sd.finish();
      answer += rest;
      fmt::print("{}{}\n", rest, g_stop ? " [stopped]" : full ? " [context full: /reset or a larger --ctx-size]" : "");
      history.push_back({{"role", "assistant"}, {"content", answer}});
      last = session->stats();
      last.prefill_tokens -= before.prefill_tokens;
      last.prefill_seconds -= before.prefill_seconds;
      last.decode_tokens -= before.decode_tokens;
      last.decode_seconds -= before.decode_seconds;
    }
  });
}

}  // namespace deltafin::cli
