// deltafin synth: write a random-weight checkpoint in an architecture's
// published layout (docs/synth.md).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/synth.h"
#include "util/error.h"
#include "util/parse.h"

namespace deltafin::cli {

void register_synth(CLI::App& app) {
  struct Args {
    SynthOptions o;
    std::vector<std::string> set;
    std::string shard_size = "4G";
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("synth", "write a random-weight checkpoint in an architecture's published layout");
  std::string archs;
  for (const auto& s : synth_architectures()) archs += (archs.empty() ? "" : ", ") + s;
  cmd->add_option("--arch", a->o.arch, "architecture: " + archs)->required();
  cmd->add_option("--out", a->o.out_dir, "directory to write (must not hold a checkpoint)")->required();
  cmd->add_option("--layers", a->o.layers, "decoder layers (default 4)")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--size-gb", a->o.size_gb, "pick the most layers whose weights fit in this many GB (1e9 bytes)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--experts", a->o.experts, "routed experts per MoE layer (default: published, at most 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--top-k", a->o.top_k, "experts per token (default: published)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--hidden", a->o.hidden, "hidden size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--moe-inter", a->o.moe_inter, "routed expert intermediate size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--inter", a->o.inter, "dense MLP intermediate size (mixtral: the experts')")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--heads", a->o.heads, "attention heads (and KDA heads)")->check(CLI::Range(int64_t{1}, int64_t{1} << 12));
  cmd->add_option("--vocab", a->o.vocab, "vocabulary size")->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  cmd->add_option("--latent", a->o.latent, "kimi_k3: routed_expert_hidden_size (default 3584)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--encoding", a->o.encoding, "routed experts: bf16, fp8, int4 or mxfp4 (default: as published)");
  cmd->add_option("--seed", a->o.seed, "random seed (same options and seed, same bytes)");
  cmd->add_option("--set", a->set, "any config key, set last: KEY=JSON, e.g. q_lora_rank=64 or text_config.kv_lora_rank=128");
  cmd->add_option("--shard-size", a->shard_size, "largest safetensors shard (default 4G)");
  cmd->add_flag("--quiet", a->quiet, "no progress on stderr");
  cmd->callback([a] {
    for (const auto& kv : a->set) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) fail("--set: '{}' is not KEY=JSON", kv);
      const std::string value = kv.substr(eq + 1);
      nlohmann::json v = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded()) v = value;  // a bare word is a string
      a->o.set.push_back({kv.substr(0, eq), v});
    }
    a->o.shard_bytes = parse_byte_size(a->shard_size, "--shard-size");
    a->o.progress = !a->quiet;
    synth_checkpoint(a->o);
  });
}

}  // namespace deltafin::cli
