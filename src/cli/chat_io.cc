#include "cli/chat_io.h"

#include <algorithm>

#include "engine/sampler.h"
#include "util/error.h"

namespace deltafin::cli {

tokenizer::ChatTemplate require_chat_template(const std::filesystem::path& dir) {
  auto t = tokenizer::ChatTemplate::load(dir);
  if (!t) fail("{} ships no chat template (tokenizer_config.json chat_template); use generate --prompt", dir.string());
  return std::move(*t);
}

std::vector<int32_t> end_of_turn_ids(const std::filesystem::path& dir, const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> ids = engine::eos_token_ids(dir);
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|end_of_msg|>", "<|end_of_text|>", "<|endoftext|>",
                             "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "</s>", "<|im_end>"})
    if (auto id = tok.token_id(marker))
      if (std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  return ids;
}

}  // namespace deltafin::cli
