// The text pipeline of a Hugging Face tokenizer.json around its model:
// normalizer -> pre-tokenizer -> (model) -> decoder. Each stage is parsed
// from its JSON object; a type deltafin does not implement is an Error that
// names it.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace deltafin::tokenizer {

// GPT-2's byte <-> printable-character table used by ByteLevel stages.
// byte_to_char(b) is the UTF-8 of the character standing for byte b;
// char_to_byte(cp) is the byte for code point cp, or -1.
const std::string& byte_to_char(unsigned char b);
int char_to_byte(uint32_t cp);

class Normalizer {
 public:
  // `j` is tokenizer.json's "normalizer" (may be null: identity).
  Normalizer(const nlohmann::json& j, std::string_view what);
  ~Normalizer();
  std::string apply(std::string s) const;
  bool identity() const { return steps_.empty(); }

  struct Step;
 private:
  std::vector<std::unique_ptr<Step>> steps_;
};

class PreTokenizer {
 public:
  // `j` is tokenizer.json's "pre_tokenizer" (may be null: one piece).
  PreTokenizer(const nlohmann::json& j, std::string_view what);
  // A split-regex pre-tokenizer followed by nothing (tiktoken).
  explicit PreTokenizer(std::unique_ptr<Regex> split);
  ~PreTokenizer();
  // Splits `text` into the pieces the model encodes one by one.
  // `first_segment`: text starts the input (Metaspace prepend_scheme "first").
  void apply(std::string_view text, bool first_segment, std::vector<std::string>& out) const;

  struct Step;
 private:
  std::vector<std::unique_ptr<Step>> steps_;
};

class Decoder {
 public:
  // `j` is tokenizer.json's "decoder" (may be null: tokens joined by spaces).
  Decoder(const nlohmann::json& j, std::string_view what);
  // Raw bytes: each token's string is its bytes (tiktoken).
  Decoder();
  ~Decoder();
  // The bytes token string `tok` contributes when it is the `index`-th token
  // of the decoded sequence (index 0 matters to Strip/Metaspace).
  std::string apply(std::string tok, size_t index) const;

  struct Step;
 private:
  std::vector<std::unique_ptr<Step>> steps_;
  bool raw_ = false;
  bool join_with_space_ = false;
};

}  // namespace deltafin::tokenizer
