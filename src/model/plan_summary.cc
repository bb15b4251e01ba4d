// What a checkpoint holds, computed from config.json alone (the published
// tensor list of the architecture): `deltafin inspect` on a config without
// weights, e.g. Kimi K3's 1.45 TB of experts on a machine that holds none.
#include <map>
#include <set>

#include "model/architectures.h"
#include "util/error.h"

namespace deltafin {

ModelSummary summarize_plan(const ModelConfig& config) {
  const std::vector<TensorSpec> plan = published_tensors(config);
  ModelSummary s;
  s.arch = config.str({"model_type"}, "");
  std::set<std::string> moe_layers;
  std::map<std::string, std::set<std::string>> experts_of_layer;
  for (const auto& t : plan) {
    const bool expert = t.name.find(".experts.") != std::string::npos;
    uint64_t params = 1;
    for (int64_t d : t.shape) params *= static_cast<uint64_t>(d);
    if (t.name.ends_with(".weight_packed")) params *= (t.dtype == DType::I32 ? 8 : 2);
    if (t.name.ends_with("_scale") || t.name.ends_with("_scale_inv") || t.name.ends_with(".weight_shape")) params = 0;
    (expert ? s.expert_bytes : s.spine_bytes) += t.bytes();
    (expert ? s.expert_params : s.spine_params) += params;
    if (t.name.ends_with("embed_tokens.weight")) {
      s.vocab = t.shape.at(0);
      s.hidden = t.shape.at(1);
    }
    const size_t lp = t.name.find("layers.");
    if (lp != std::string::npos) {
      const std::string layer = t.name.substr(lp + 7, t.name.find('.', lp + 7) - lp - 7);
      s.layers = std::max<int64_t>(s.layers, std::stoll(layer) + 1);
      if (expert) {
        const size_t ep = t.name.find(".experts.") + 9;
        experts_of_layer[layer].insert(t.name.substr(ep, t.name.find('.', ep) - ep));
      }
    }
  }
  s.moe_layers = static_cast<int64_t>(experts_of_layer.size());
  for (const auto& [l, e] : experts_of_layer) s.experts_per_layer = std::max<int64_t>(s.experts_per_layer, e.size());
  const nlohmann::json* text = config.object("text_config");
  const ModelConfig tc = text ? ModelConfig(*text, config.label()) : config;
  s.experts_per_token = tc.i64({"num_experts_per_token", "num_experts_per_tok"}, 0);
  const uint64_t n = static_cast<uint64_t>(s.moe_layers * s.experts_per_layer);
  s.bytes_per_expert = n ? s.expert_bytes / n : 0;
  return s;
}

}  // namespace deltafin
