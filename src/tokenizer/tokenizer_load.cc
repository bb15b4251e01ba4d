// Loading of tokenizer.json and tiktoken.model into a Tokenizer.
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::tokenizer {

using nlohmann::json;

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot read the file; check that it exists and is readable", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, std::string_view what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON ({}); re-download the file", what, e.what());
  }
}

// Kimi K2's split pattern (tokenization_kimi.py), fancy-regex syntax.
constexpr const char* kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

bool base64_decode(std::string_view in, std::string& out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = val(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

void set_token(std::vector<std::string>& id_to_token, int32_t id, std::string s) {
  if (id >= static_cast<int32_t>(id_to_token.size())) id_to_token.resize(static_cast<size_t>(id) + 1);
  id_to_token[id] = std::move(s);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    fail("{}: not a directory; --model takes a model directory (with tokenizer.json or tiktoken.model)",
         dir.string());
  auto tj = dir / "tokenizer.json";
  if (std::filesystem::exists(tj)) return from_tokenizer_json(read_file(tj), tj.string());
  auto tk = dir / "tiktoken.model";
  if (std::filesystem::exists(tk)) {
    auto cfg_path = dir / "tokenizer_config.json";
    json cfg = json::object();
    if (std::filesystem::exists(cfg_path)) cfg = parse_json(read_file(cfg_path), cfg_path.string());
    return from_tiktoken(read_file(tk), cfg, tk.string());
  }
  fail("{}: no tokenizer.json or tiktoken.model in this directory; copy the model's tokenizer files there",
       dir.string());
}

// The special-token ids a post_processor puts before and after a single
// sequence. Processors that add no ids (ByteLevel) are accepted; unknown ones
// are an error naming the type.
static void parse_post_processor(const json& p, std::string_view what, std::vector<int32_t>& prefix,
                                 std::vector<int32_t>& suffix) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& q : p.at("processors")) parse_post_processor(q, what, prefix, suffix);
  } else if (type == "TemplateProcessing") {
    const json& specials = p.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (const auto& item : p.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string id = item.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(id)) fail("{}: post_processor names special token '{}' without ids", what, id);
      for (const auto& v : specials[id].at("ids")) (seen_sequence ? suffix : prefix).push_back(v.get<int32_t>());
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(p.at("cls").at(1).get<int32_t>());
    suffix.push_back(p.at("sep").at(1).get<int32_t>());
  } else if (type != "ByteLevel") {
    fail("{}: post_processor type '{}' is not supported", what, type);
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(std::string_view text, std::string_view what) {
  json j = parse_json(text, what);
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->kind_ = Kind::HfBpe;
  try {
    const json& m = j.at("model");
    std::string type = m.value("type", "BPE");
    if (type != "BPE")
      fail("{}: model type \"{}\" is not supported (only BPE)", what, type);
    auto str_or_empty = [&](const char* k) {
      auto it = m.find(k);
      return it == m.end() || it->is_null() ? std::string() : it->get<std::string>();
    };
    t->byte_fallback_ = m.value("byte_fallback", false);
    t->ignore_merges_ = m.value("ignore_merges", false);
    t->fuse_unk_ = m.value("fuse_unk", false);
    t->subword_prefix_ = str_or_empty("continuing_subword_prefix");
    t->word_suffix_ = str_or_empty("end_of_word_suffix");
    const json& vocab = m.at("vocab");
    t->vocab_.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      int32_t id = it.value().get<int32_t>();
      if (id < 0) fail("{}: negative id {} for token {}", what, id, it.key());
      t->vocab_[it.key()] = id;
      set_token(t->id_to_token_, id, it.key());
    }
    std::string unk = str_or_empty("unk_token");
    if (!unk.empty()) {
      auto it = t->vocab_.find(unk);
      if (it == t->vocab_.end()) fail("{}: unk_token \"{}\" is not in the vocabulary", what, unk);
      t->unk_ = it->second;
    }
    if (t->byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        auto it = t->vocab_.find(fmt::format("<0x{:02X}>", b));
        if (it == t->vocab_.end()) fail("{}: byte_fallback is on but token <0x{:02X}> is missing", what, b);
        t->byte_fallback_ids_[b] = it->second;
      }
    }
    const json& merges = m.at("merges");
    t->merges_.reserve(merges.size());
    int32_t rank = 0;
    std::string a, b;
    for (const auto& mg : merges) {
      if (mg.is_string()) {
        const std::string& s = mg.get_ref<const std::string&>();
        size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) fail("{}: merge #{} \"{}\" is not two tokens", what, rank, s);
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = mg.at(0).get<std::string>();
        b = mg.at(1).get<std::string>();
      }
      const std::string& pre = t->subword_prefix_;
      std::string merged = !pre.empty() && b.compare(0, pre.size(), pre) == 0 ? a + b.substr(pre.size()) : a + b;
      auto ia = t->vocab_.find(a), ib = t->vocab_.find(b), im = t->vocab_.find(merged);
      if (ia == t->vocab_.end() || ib == t->vocab_.end() || im == t->vocab_.end())
        fail("{}: merge #{} (\"{}\" \"{}\") uses a token missing from the vocabulary", what, rank, a, b);
      t->merges_.add(ia->second, ib->second, rank, im->second);
      ++rank;
    }
    if (j.contains("added_tokens")) {
      // tokenizers gives an added token its vocabulary id when the model has
      // it, else the next id after the model and the previous added tokens
      // (the file's "id" is then only a hint; in published files they agree).
      const int32_t model_size = static_cast<int32_t>(t->vocab_.size());
      int32_t max_added = -1;
      for (const auto& at : j["added_tokens"]) {
        AddedToken a2;
        a2.content = at.at("content").get<std::string>();
        auto in_vocab = t->vocab_.find(a2.content);
        if (in_vocab != t->vocab_.end()) a2.id = in_vocab->second;
        else if (max_added < 0) a2.id = model_size;
        else a2.id = max_added >= model_size ? max_added + 1 : model_size;
        max_added = std::max(max_added, a2.id);
        a2.special = at.value("special", false);
        a2.lstrip = at.value("lstrip", false);
        a2.rstrip = at.value("rstrip", false);
        a2.single_word = at.value("single_word", false);
        a2.normalized = at.value("normalized", !a2.special);
        set_token(t->id_to_token_, a2.id, a2.content);
        t->added_.add(std::move(a2));
      }
    }
    t->normalizer_ = std::make_unique<Normalizer>(j.value("normalizer", json()), what);
    t->pre_ = std::make_unique<PreTokenizer>(j.value("pre_tokenizer", json()), what);
    t->decoder_ = std::make_unique<Decoder>(j.value("decoder", json()), what);
    parse_post_processor(j.value("post_processor", json()), what, t->post_prefix_, t->post_suffix_);
  } catch (const json::exception& e) {
    fail("{}: unexpected tokenizer.json layout ({})", what, e.what());
  }
  t->finish_load();
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::from_tiktoken(std::string_view text, const json& config, std::string_view what) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->kind_ = Kind::Tiktoken;
  size_t line_no = 0, pos = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    int32_t rank = -1;
    if (sp != std::string_view::npos) {
      try {
        rank = std::stoi(std::string(line.substr(sp + 1)));
      } catch (const std::exception&) {
        rank = -1;
      }
    }
    if (sp == std::string_view::npos || rank < 0 || !base64_decode(line.substr(0, sp), bytes) || bytes.empty())
      fail("{}:{}: expected \"<base64 token> <rank>\"", what, line_no);
    if (!t->vocab_.emplace(bytes, rank).second)
      fail("{}:{}: token listed twice", what, line_no);
    set_token(t->id_to_token_, rank, bytes);
  }
  int32_t num_base = static_cast<int32_t>(t->vocab_.size());
  for (int b = 0; b < 256; ++b) {
    auto it = t->vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == t->vocab_.end()) fail("{}: byte 0x{:02X} has no rank; a tiktoken file needs all 256 bytes", what, b);
    t->byte_fallback_ids_[b] = it->second;
  }
  // Every way to write a token as two tokens is a merge of the token's rank.
  for (const auto& [tok, rank] : t->vocab_) {
    for (size_t k = 1; k < tok.size(); ++k) {
      auto l = t->vocab_.find(tok.substr(0, k));
      if (l == t->vocab_.end()) continue;
      auto r = t->vocab_.find(tok.substr(k));
      if (r == t->vocab_.end()) continue;
      t->merges_.add(l->second, r->second, rank, rank);
    }
  }
  // Specials: tokenizer_config.json's added_tokens_decoder; the reserved
  // range after the base tokens is named <|reserved_token_i|> where unlisted
  // (what tokenization_kimi.py does).
  std::map<int32_t, AddedToken> specials;
  if (config.contains("added_tokens_decoder")) {
    for (auto it = config["added_tokens_decoder"].begin(); it != config["added_tokens_decoder"].end(); ++it) {
      AddedToken a;
      try {
        a.id = std::stoi(it.key());
      } catch (const std::exception&) {
        fail("{}: tokenizer_config.json added_tokens_decoder key \"{}\" is not an id", what, it.key());
      }
      a.content = it.value().value("content", "");
      a.special = it.value().value("special", true);
      specials[a.id] = a;
    }
  }
  if (!specials.empty()) {
    for (int32_t i = num_base; i < num_base + 256; ++i)
      if (!specials.count(i)) specials[i] = AddedToken{fmt::format("<|reserved_token_{}|>", i), i, true};
  }
  for (auto& [id, a] : specials) {
    set_token(t->id_to_token_, id, a.content);
    t->added_.add(a);
  }
  std::string pattern = config.value("pat_str", std::string(kKimiPattern));
  t->pre_ = std::make_unique<PreTokenizer>(
      std::make_unique<Regex>(rewrite_class_intersections(pattern), what));
  t->normalizer_ = std::make_unique<Normalizer>(json(), what);
  t->decoder_ = std::make_unique<Decoder>();
  t->finish_load();
  return t;
}

}  // namespace deltafin::tokenizer
