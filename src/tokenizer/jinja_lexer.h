// Lexer of the chat-template Jinja subset (internal to jinja_*.cc): splits a
// template into text runs and tags, each tag into tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace deltafin::jinja {

struct Token {
  enum class T { Name, String, Int, Float, Op, End };
  T t;
  std::string text;  // name, operator, or decoded string
  Value v;
  int line;
};

// A text run or one {{ }} / {% %} tag with its tokens.
struct Item {
  bool tag = false;
  bool output = false;  // {{ }} rather than {% %}
  std::string text;
  std::vector<Token> toks;
  int line = 1;
};


// Lexes `source` after transformers' trim_blocks / lstrip_blocks and the
// `-` whitespace control. Throws Error "<name> line N: ...".
std::vector<Item> lex_template(std::string_view source, const std::string& name);

}  // namespace deltafin::jinja
