// deltafin score: logits of every position of a token sequence, as float32
// little-endian [tokens x vocab], for comparison with a reference.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "engine/session.h"
#include "util/error.h"
#include "util/parse.h"

namespace deltafin::cli {

void register_score(CLI::App& app) {
  struct Args {
    ModelArgs m;
    std::string tokens, out;
    int64_t chunk = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("score", "write the logits of every position of a token sequence");
  add_model_options(cmd, a->m);
  cmd->add_option("--tokens", a->tokens, "token ids, e.g. 1,2,3")->required();
  cmd->add_option("--logits-out", a->out, "output file: float32 little-endian [tokens x vocab]")->required();
  cmd->add_option("--prefill-chunk", a->chunk, "rows per forward block (1: token by token; default: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->callback([a] {
    std::vector<int32_t> toks = parse_token_list(a->tokens, "--tokens");
    auto rt = load(a->m);
    const int64_t V = rt->model().vocab(), n = static_cast<int64_t>(toks.size());
    for (int32_t t : toks)
      if (t >= V) fail("--tokens: id {} is outside the vocabulary (0 .. {})", t, V - 1);
    Session s(rt->model(), a->chunk > 0 ? a->chunk : n);
    std::vector<float> logits(static_cast<size_t>(n * V));
    s.prefill(toks, logits.data(), nullptr);
    std::ofstream out(a->out, std::ios::binary | std::ios::trunc);
    if (!out) fail("--logits-out: cannot write {}", a->out);
    static_assert(std::endian::native == std::endian::little);
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
    if (!out) fail("--logits-out: error writing {}", a->out);
    report_stats(a->m, *rt, s.stats(), s.stats().prefill_seconds);
    fmt::print(stderr, "scored {} tokens ({:.1f} tok/s) -> {} [{} x {}] float32\n", n,
               s.stats().prefill_tok_s(), a->out, n, V);
  });
}

}  // namespace deltafin::cli
