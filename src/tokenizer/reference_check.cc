// Compares deltafin's tokenizer with reference outputs produced by the npm
// scripts in tests/npm (run by tests/tokenizer/run_reference.sh):
//   tokenizer_reference ids MODEL_DIR CORPUS.jsonl REF.jsonl
//     REF line i = {"ids": [...], "text": reference decode(ids)} for corpus
//     line i (a JSON string). Checks encode == ids, decode(ids) == text,
//     the streaming decoder == decode, and decode(encode(x)) == x wherever
//     the reference round-trips x.
//   tokenizer_reference chat TEMPLATES.json CASES.json REF.json
//     (the inputs and output of tests/npm/render_chat.mjs): every rendering
//     byte-identical, and an error wherever the reference raised one.
// Exit 1 on any difference.
#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

using deltafin::tokenizer::Tokenizer;
using nlohmann::json;

namespace {

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  if (!f) deltafin::fail("{}: cannot read", path);
  std::vector<json> v;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

std::string show(std::string_view s) {
  json j = std::string(s.substr(0, 160));
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

int check_ids(const std::string& model_dir, const std::string& corpus_path, const std::string& ref_path) {
  auto tok = Tokenizer::load(model_dir);
  auto corpus = read_jsonl(corpus_path);
  auto ref = read_jsonl(ref_path);
  if (corpus.size() != ref.size()) deltafin::fail("{} has {} lines but {} has {}", corpus_path, corpus.size(), ref_path, ref.size());
  size_t bytes = 0, tokens = 0, id_bad = 0, dec_bad = 0, stream_bad = 0, rt_checked = 0, rt_bad = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    std::string text = corpus[i].get<std::string>();
    auto want = ref[i].at("ids").get<std::vector<int32_t>>();
    std::string want_text = ref[i].at("text").get<std::string>();
    bytes += text.size();
    tokens += want.size();
    auto got = tok->encode(text);
    if (got != want) {
      if (id_bad++ < 5) {
        size_t k = 0;
        while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
        size_t lo = k >= 3 ? k - 3 : 0;
        std::vector<int32_t> g(got.begin() + lo, got.begin() + std::min(got.size(), k + 5));
        std::vector<int32_t> w(want.begin() + lo, want.begin() + std::min(want.size(), k + 5));
        std::cout << fmt::format("doc {}: ids differ at token {} (got {} tokens, want {})\n  got  [{}] {}\n  want [{}] {}\n",
                                 i, k, got.size(), want.size(), fmt::join(g, ","), show(tok->decode(g)),
                                 fmt::join(w, ","), show(tok->decode(w)));
      }
    }
    std::string dec = tok->decode(want);
    if (dec != want_text && dec_bad++ < 5)
      std::cout << fmt::format("doc {}: decode differs\n  got  {}\n  want {}\n", i, show(dec), show(want_text));
    Tokenizer::StreamDecoder sd(*tok);
    std::string streamed;
    for (int32_t id : want) streamed += sd.next(id);
    streamed += sd.finish();
    if (streamed != dec && stream_bad++ < 5)
      std::cout << fmt::format("doc {}: streaming decode differs from decode\n", i);
    if (want_text == text) {
      ++rt_checked;
      if (tok->decode(got) != text && rt_bad++ < 5) std::cout << fmt::format("doc {}: decode(encode(x)) != x\n", i);
    }
  }
  std::cout << fmt::format(
      "{}: {} documents, {} bytes, {} reference tokens; ids differ in {}, decode differs in {}, "
      "streaming differs in {}; round trip checked on {} (the reference's lossless ones), failed {}\n",
      model_dir, corpus.size(), bytes, tokens, id_bad, dec_bad, stream_bad, rt_checked, rt_bad);
  return id_bad || dec_bad || stream_bad || rt_bad ? 1 : 0;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) deltafin::fail("{}: cannot read", path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

int check_chat(const std::string& templates_path, const std::string& cases_path, const std::string& ref_path) {
  using deltafin::tokenizer::ChatTemplate;
  using nlohmann::ordered_json;
  auto templates = ordered_json::parse(slurp(templates_path));
  auto cases = ordered_json::parse(slurp(cases_path));
  auto ref = ordered_json::parse(slurp(ref_path));
  std::map<std::string, ordered_json> by_name;
  for (const auto& r : ref) by_name[r.at("template").get<std::string>() + "/" + r.at("case").get<std::string>()] = r;
  size_t k = 0, same = 0, bad = 0, errors = 0;
  for (const auto& t : templates) {
    std::string name = t.at("name").get<std::string>();
    std::optional<ChatTemplate> ct;
    if (t.contains("model_dir")) {
      ct = ChatTemplate::load(t["model_dir"].get<std::string>());
      if (!ct) deltafin::fail("{}: no chat template", t["model_dir"].get<std::string>());
    } else {
      ct.emplace(slurp(t.at("file").get<std::string>()), t.value("bos", ""), t.value("eos", ""), name);
    }
    for (const auto& c : cases) {
      if (c.contains("only")) {
        bool listed = false;
        for (const auto& o : c["only"]) listed |= o.get<std::string>() == name;
        if (!listed) continue;
      }
      std::string key = name + "/" + c.at("name").get<std::string>();
      if (!by_name.count(key)) deltafin::fail("{}: no reference rendering for {}", ref_path, key);
      const auto& r = by_name[key];
      ++k;
      std::string got, err;
      try {
        got = ct->render(c.at("messages"), c.value("add_generation_prompt", false), c.value("tools", ordered_json()),
                         c.value("extra", ordered_json::object()));
      } catch (const deltafin::Error& e) {
        err = e.what();
      }
      std::string label = name + "/" + c.at("name").get<std::string>();
      if (r.contains("error")) {
        ++errors;
        if (err.empty()) {
          ++bad;
          std::cout << fmt::format("{}: the reference raised \"{}\" but deltafin rendered {}\n", label,
                                   r["error"].get<std::string>(), show(got));
        } else {
          ++same;
        }
        continue;
      }
      std::string want = r.at("text").get<std::string>();
      if (!err.empty()) {
        ++bad;
        std::cout << fmt::format("{}: deltafin raised \"{}\"\n", label, err);
      } else if (got != want) {
        ++bad;
        size_t d = 0;
        while (d < got.size() && d < want.size() && got[d] == want[d]) ++d;
        size_t lo = d > 60 ? d - 60 : 0;
        std::cout << fmt::format("{}: differs at byte {}\n  got  {}\n  want {}\n", label, d,
                                 show(got.substr(lo, 200)), show(want.substr(lo, 200)));
      } else {
        ++same;
      }
    }
  }
  std::cout << fmt::format("chat templates: {} renderings, {} identical to @huggingface/jinja ({} of them "
                           "errors on both sides), {} differ\n", k, same, errors, bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "ids" && argc == 5) return check_ids(argv[2], argv[3], argv[4]);
    if (mode == "chat" && argc == 5) return check_chat(argv[2], argv[3], argv[4]);
    std::cerr << "usage: tokenizer_reference ids MODEL_DIR CORPUS.jsonl REF.jsonl\n"
                 "       tokenizer_reference chat TEMPLATES.json CASES.json REF.json\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_reference: " << e.what() << "\n";
    return 1;
  }
}
