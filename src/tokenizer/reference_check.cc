// Compares deltafin's tokenizer with reference outputs produced by the npm
// scripts in tests/npm (run by tests/tokenizer/run_reference.sh):
//   tokenizer_reference ids MODEL_DIR CORPUS.jsonl REF.jsonl
//     REF line i = {"ids": [...], "text": reference decode(ids)} for corpus
//     line i (a JSON string). Checks encode == ids, decode(ids) == text,
//     the streaming decoder == decode, and decode(encode(x)) == x wherever
//     the reference round-trips x. Exit 1 on any difference.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "ids" && argc == 5) return check_ids(argv[2], argv[3], argv[4]);
    std::cerr << "usage: tokenizer_reference ids MODEL_DIR CORPUS.jsonl REF.jsonl\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_reference: " << e.what() << "\n";
    return 1;
  }
}
