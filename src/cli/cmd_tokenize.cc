// `deltafin tokenize` and `deltafin detokenize`: the model's own tokenizer,
// without loading any weights.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "engine/runtime.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"
#include "util/parse.h"

namespace deltafin::cli {

namespace {

struct TokenizeArgs {
  std::string model, text;
  bool json = false, pieces = false, no_special = false;
};

struct DetokenizeArgs {
  std::string model, tokens;
  bool skip_special = false;
};

std::string read_stdin() {
  std::string s{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  if (std::cin.bad()) fail("cannot read standard input");
  return s;
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "print the token ids of a text (standard input when no --text)");
  cmd->add_option("--model", a->model, "model directory (tokenizer.json, or tiktoken.model + tokenizer_config.json), or a store")
      ->required();
  auto* text = cmd->add_option("--text", a->text, "the text; read from standard input when absent");
  cmd->add_flag("--json", a->json, "print only a JSON array of the ids");
  cmd->add_flag("--pieces", a->pieces, "print one line per token: id and its text");
  cmd->add_flag("--no-special", a->no_special, "encode special tokens written in the text as plain text");
  cmd->callback([a, text]() {
    auto tok = tokenizer::Tokenizer::load(checkpoint_dir_of(a->model));
    std::string input = text->count() ? a->text : read_stdin();
    auto ids = tok->encode(input, !a->no_special);
    if (a->json) {
      fmt::print("{}\n", nlohmann::json(ids).dump());
    } else if (a->pieces) {
      for (size_t i = 0; i < ids.size(); ++i) {
        std::string piece = tok->token_bytes(ids[i], i);
        if (tokenizer::utf8_valid(piece)) {
          fmt::print("{}\t{}\n", ids[i], nlohmann::json(piece).dump());
        } else {  // part of a character: show its bytes
          std::string hex;
          for (unsigned char c : piece) hex += fmt::format("<0x{:02X}>", c);
          fmt::print("{}\t{}\n", ids[i], hex);
        }
      }
    } else {
      fmt::print("{}\n", fmt::join(ids, ","));
    }
    if (!a->json) fmt::print(stderr, "{} tokens, {} bytes\n", ids.size(), input.size());
  });
}

void register_detokenize(CLI::App& app) {
  auto a = std::make_shared<DetokenizeArgs>();
  auto* cmd = app.add_subcommand("detokenize", "print the text of token ids");
  cmd->add_option("--model", a->model, "model directory (tokenizer.json, or tiktoken.model + tokenizer_config.json), or a store")
      ->required();
  cmd->add_option("--tokens", a->tokens, "comma-separated token ids, e.g. 9707,1879")->required();
  cmd->add_flag("--skip-special", a->skip_special, "leave special tokens out");
  cmd->callback([a]() {
    auto ids = parse_token_list(a->tokens, "--tokens");
    auto tok = tokenizer::Tokenizer::load(checkpoint_dir_of(a->model));
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size() || tok->token_string(id).empty())
        fail("--tokens: id {} is not in the vocabulary of {} (ids 0..{})", id, a->model, tok->vocab_size() - 1);
    std::string text = tok->decode(ids, a->skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    // Exact bytes for pipes and files; a final newline only on a terminal.
    if (isatty(fileno(stdout))) std::fputc('\n', stdout);
  });
}

}  // namespace deltafin::cli
