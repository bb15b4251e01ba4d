// deltafin inspect: what a checkpoint holds and what each token touches.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "model/architectures.h"
#include "format/checkpoint.h"
#include <filesystem>
#include "util/parse.h"

namespace deltafin::cli {

void register_inspect(CLI::App& app) {
  struct Args {
    ModelArgs m;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("inspect", "architecture, parameter counts and bytes of a model");
  add_model_options(cmd, a->m);
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a] {
    // A config.json without its weights (e.g. a real Kimi K3 config and
    // index): the summary comes from the architecture's published tensor list.
    namespace fs = std::filesystem;
    const fs::path dir = a->m.model;
    bool weights = fs::exists(dir / "model.safetensors") || fs::exists(dir / "manifest.json");
    if (!weights && fs::exists(dir / "model.safetensors.index.json")) {
      weights = true;
      const nlohmann::json index = read_json_file(dir / "model.safetensors.index.json");
      const nlohmann::json map = index.value("weight_map", nlohmann::json::object());
      for (const auto& [name, file] : map.items())
        if (file.is_string() && !fs::exists(dir / file.get<std::string>())) weights = false;
    }
    std::unique_ptr<Runtime> rt;
    ModelSummary plan;
    if (weights || !fs::exists(dir / "config.json")) {
      rt = load(a->m);
    } else {
      plan = summarize_plan(ModelConfig(read_json_file(dir / "config.json"), (dir / "config.json").string()));
      if (!a->json) fmt::print("(weights not present: counted from config.json and the published tensor list)\n");
    }
    const ModelSummary& s = rt ? rt->model().summary() : plan;
    const double touched = static_cast<double>(s.moe_layers * s.experts_per_token) * s.bytes_per_expert;
    if (a->json) {
      nlohmann::json j = {{"arch", s.arch},
                          {"vocab", s.vocab},
                          {"hidden", s.hidden},
                          {"layers", s.layers},
                          {"moe_layers", s.moe_layers},
                          {"experts_per_layer", s.experts_per_layer},
                          {"experts_per_token", s.experts_per_token},
                          {"spine_params", s.spine_params},
                          {"expert_params", s.expert_params},
                          {"spine_bytes", s.spine_bytes},
                          {"expert_bytes", s.expert_bytes},
                          {"bytes_per_expert", s.bytes_per_expert},
                          {"expert_bytes_per_token", static_cast<uint64_t>(touched)}};
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("model            {}\n", a->m.model);
    fmt::print("architecture     {}\n", s.arch);
    fmt::print("layers           {} ({} MoE), hidden {}, vocab {}\n", s.layers, s.moe_layers, s.hidden, s.vocab);
    fmt::print("experts          {} per layer, {} per token\n", s.experts_per_layer, s.experts_per_token);
    auto count = [](uint64_t n) {
      return n >= 1000000000ull ? fmt::format("{:.2f} B", n / 1e9) : fmt::format("{:.2f} M", n / 1e6);
    };
    fmt::print("parameters       {} total: spine {}, routed experts {}\n", count(s.spine_params + s.expert_params),
               count(s.spine_params), count(s.expert_params));
    fmt::print("bytes            spine {} ({:.2f} GB), routed experts {} ({:.2f} TB), {} bytes per expert\n",
               format_bytes(s.spine_bytes), s.spine_bytes / 1e9, format_bytes(s.expert_bytes), s.expert_bytes / 1e12,
               s.bytes_per_expert);
    fmt::print("per token        {} ({:.2f} GB) of expert weights touched ({} layers x {} experts)\n",
               format_bytes(touched), touched / 1e9, s.moe_layers, s.experts_per_token);
  });
}

}  // namespace deltafin::cli
