// A model's chat template: tokenizer_config.json's "chat_template" (or
// chat_template.jinja / chat_template.json beside it), rendered the way
// transformers' apply_chat_template does, with the Jinja subset of jinja.h.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja.h"

namespace deltafin::tokenizer {

class ChatTemplate {
 public:
  // The template of `model_dir`; nullopt when the model ships none. Throws
  // Error when the template does not parse (naming the file and the line).
  static std::optional<ChatTemplate> load(const std::filesystem::path& model_dir);

  // `source`: Jinja text; bos/eos: the tokens' contents ("" when none).
  ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token,
               std::string name = "chat template");

  // messages: [{"role": ..., "content": ..., "tool_calls": ..., ...}];
  // tools: a list of tool schemas or null; extra: more variables, such as
  // {"enable_thinking": false}. Throws Error (raise_exception in the template).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  jinja::Template tmpl_;
  std::string bos_, eos_;
};

}  // namespace deltafin::tokenizer
