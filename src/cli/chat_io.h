// What `chat` and `generate --chat` share: the model's chat template and the
// tokens that end an assistant turn.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::cli {

// The template of `dir`; throws Error when the model ships none.
tokenizer::ChatTemplate require_chat_template(const std::filesystem::path& dir);

// generation_config.json's eos ids plus the end-of-turn markers of common chat
// formats that exist in this vocabulary (<|im_end|>, <|eot_id|>,
// <|end_of_msg|>, ...).
std::vector<int32_t> end_of_turn_ids(const std::filesystem::path& dir, const tokenizer::Tokenizer& tok);

}  // namespace deltafin::cli
