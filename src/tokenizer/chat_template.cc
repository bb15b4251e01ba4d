#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace deltafin::tokenizer {

using nlohmann::ordered_json;

namespace {
std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot read the file", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// bos_token / eos_token are a string or an AddedToken object {"content": ...}.
std::string token_content(const ordered_json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return (*it)["content"].get<std::string>();
  return "";
}

// "chat_template" is a string, or a list of {"name", "template"} (use "default").
std::optional<std::string> template_text(const ordered_json& v, const std::string& what) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    for (const auto& e : v)
      if (e.value("name", "") == "default") return e.at("template").get<std::string>();
    fail("{}: chat_template is a list without a \"default\" entry", what);
  }
  return std::nullopt;
}
}  // namespace

std::optional<ChatTemplate> ChatTemplate::load(const std::filesystem::path& dir) {
  ordered_json cfg = ordered_json::object();
  auto cfg_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) {
    try {
      cfg = ordered_json::parse(read_file(cfg_path));
    } catch (const ordered_json::parse_error& e) {
      fail("{}: not valid JSON ({})", cfg_path.string(), e.what());
    }
  }
  std::optional<std::string> text;
  std::string what = cfg_path.string();
  if (auto j = dir / "chat_template.jinja"; std::filesystem::exists(j)) {
    text = read_file(j);
    what = j.string();
  } else if (auto js = dir / "chat_template.json"; std::filesystem::exists(js)) {
    ordered_json c = ordered_json::parse(read_file(js), nullptr, false);
    if (c.is_discarded() || !c.contains("chat_template")) fail("{}: expected {{\"chat_template\": ...}}", js.string());
    text = template_text(c["chat_template"], js.string());
    what = js.string();
  } else if (cfg.contains("chat_template")) {
    text = template_text(cfg["chat_template"], what);
  }
  if (!text) return std::nullopt;
  return ChatTemplate(*text, token_content(cfg, "bos_token"), token_content(cfg, "eos_token"), what);
}

ChatTemplate::ChatTemplate(std::string_view source, std::string bos, std::string eos, std::string name)
    : tmpl_(source, std::move(name)), bos_(std::move(bos)), eos_(std::move(eos)) {}

std::string ChatTemplate::render(const ordered_json& messages, bool add_generation_prompt,
                                 const ordered_json& tools, const ordered_json& extra) const {
  if (!messages.is_array()) fail("chat messages must be a JSON array of {{\"role\", \"content\"}} objects");
  jinja::Dict g;
  g.set("messages", jinja::Value::from_json(messages));
  g.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  g.set("bos_token", jinja::Value(bos_));
  g.set("eos_token", jinja::Value(eos_));
  // transformers passes tools=None when there are none.
  g.set("tools", tools.is_null() || (tools.is_array() && tools.empty()) ? jinja::Value::none()
                                                                          : jinja::Value::from_json(tools));
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) g.set(it.key(), jinja::Value::from_json(it.value()));
  return tmpl_.render(g);
}

}  // namespace deltafin::tokenizer
