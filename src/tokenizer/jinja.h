// A Jinja subset for chat templates, written for what real templates use
// (Qwen3, DeepSeek-V3, Kimi K2, Mixtral, Llama): {{ }}, {% if/elif/else %},
// {% for %} (loop.*, else, break/continue, filter clause), {% set %} (names,
// tuple targets, namespace attributes, blocks), {% macro %}, whitespace
// control and comments; expressions with Python semantics (slicing, `in`,
// `~`, `is` tests, filters, string/dict/list methods, conditional
// expressions). Rendering follows transformers: trim_blocks, lstrip_blocks,
// one trailing newline of the template dropped. Anything outside the subset
// is an Error naming the construct and the template line.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/jinja_value.h"

namespace deltafin::jinja {

struct Node;

class Template {
 public:
  // Parses `source`; `name` prefixes error messages. Throws Error.
  Template(std::string_view source, std::string name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `globals` (messages, tools, add_generation_prompt, ...).
  // Throws Error (raise_exception(...) in the template, type errors).
  std::string render(const Dict& globals) const;

 private:
  std::string name_;
  std::unique_ptr<std::vector<Node>> body_;
};

}  // namespace deltafin::jinja
