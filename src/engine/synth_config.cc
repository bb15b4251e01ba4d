// synth's config.json: the published configs of each architecture, the
// shape overrides, the encoding's quantization_config (docs/synth.md).
#include <algorithm>
#include <fmt/format.h>

#include "engine/synth.h"
#include "util/error.h"

namespace deltafin {

using json = nlohmann::json;

namespace {

// quantization_config blocks as the fixtures (and their makers) publish them.
json fp8_quant() {
  return {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
}

json compressed_tensors(const std::string& format, bool int4, json ignore) {
  json w = {{"actorder", nullptr}, {"block_structure", nullptr}, {"dynamic", false},   {"group_size", 32},
            {"num_bits", 4},       {"observer", "minmax"},        {"observer_kwargs", json::object()},
            {"strategy", "group"}, {"symmetric", true},           {"type", int4 ? "int" : "float"}};
  json group = {{"input_activations", nullptr}, {"output_activations", nullptr}, {"targets", {"Linear"}}, {"weights", w}};
  if (!int4) {
    group["format"] = format;
    group["weights"]["scale_dtype"] = "torch.uint8";
    group["weights"]["zp_dtype"] = nullptr;
  }
  return {{"config_groups", {{"group_0", group}}},
          {"format", format},
          {"ignore", std::move(ignore)},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"}};
}

json quant_config(const std::string& arch, const std::string& enc) {
  if (enc == "bf16") return nullptr;
  if (enc == "fp8") return fp8_quant();
  json ignore = {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"};
  if (enc == "int4") ignore.push_back("lm_head");
  else ignore.push_back("re:.*lm_head.*");
  // Routers that are nn.Linear in transformers must not be quantized.
  if (arch == "qwen3_moe") ignore.push_back("re:.*mlp\\.gate$");
  if (arch == "mixtral") ignore.push_back("re:.*block_sparse_moe\\.gate$");
  if (arch == "kimi_k3") {
    ignore.push_back("re:.*vision_tower.*");
    ignore.push_back("re:.*mm_projector.*");
  }
  json q = compressed_tensors(enc == "int4" ? "pack-quantized" : "mxfp4-pack-quantized", enc == "int4", ignore);
  if (arch == "kimi_k3") q["global_compression_ratio"] = nullptr;
  return q;
}

std::string default_encoding(const std::string& arch) {
  if (arch == "deepseek_v3") return "fp8";
  if (arch == "kimi_k3") return "mxfp4";
  return "bf16";
}

// 1-based MLA layers: every fourth, and the last (Kimi K3 and Kimi-Linear
// put 3 KDA layers before each MLA layer).
void attn_lists(json& la, int64_t L) {
  json full = json::array(), kda = json::array();
  for (int64_t l = 1; l <= L; ++l) (l % 4 == 0 || l == L ? full : kda).push_back(l);
  la["full_attn_layers"] = full;
  la["kda_layers"] = kda;
}

// The published configs (DeepSeek-V3, Qwen3-30B-A3B, Mixtral-8x7B,
// Kimi-Linear-48B-A3B, Kimi K3) with synth's defaults: at most 64 experts
// and one dense first layer.
json base_config(const std::string& arch, int64_t L) {
  const json common = {{"bos_token_id", 0}, {"eos_token_id", 1}, {"tie_word_embeddings", false},
                       {"use_cache", true}, {"initializer_range", 0.02}, {"torch_dtype", "bfloat16"}};
  json c;
  if (arch == "deepseek_v3") {
    c = {{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "deepseek_v3"}, {"vocab_size", 129280},
         {"hidden_size", 7168}, {"intermediate_size", 18432}, {"moe_intermediate_size", 2048},
         {"num_hidden_layers", L}, {"num_attention_heads", 128}, {"num_key_value_heads", 128},
         {"n_shared_experts", 1}, {"n_routed_experts", 64}, {"num_experts_per_tok", 8}, {"n_group", 8},
         {"topk_group", 4}, {"routed_scaling_factor", 2.5}, {"norm_topk_prob", true}, {"scoring_func", "sigmoid"},
         {"topk_method", "noaux_tc"}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1}, {"q_lora_rank", 1536},
         {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128},
         {"hidden_act", "silu"}, {"max_position_embeddings", 163840}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000},
         {"rope_scaling", {{"type", "yarn"}, {"factor", 40.0}, {"original_max_position_embeddings", 4096},
                           {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}},
         {"rope_interleave", true}, {"attention_bias", false}, {"num_nextn_predict_layers", 0}};
  } else if (arch == "qwen3_moe") {
    c = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 151936},
         {"hidden_size", 2048}, {"intermediate_size", 6144}, {"moe_intermediate_size", 768},
         {"num_hidden_layers", L}, {"num_attention_heads", 32}, {"num_key_value_heads", 4}, {"head_dim", 128},
         {"num_experts", 64}, {"num_experts_per_tok", 8}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
         {"mlp_only_layers", json::array()}, {"hidden_act", "silu"}, {"max_position_embeddings", 40960},
         {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"rope_scaling", nullptr}, {"attention_bias", false}};
  } else if (arch == "mixtral") {
    c = {{"architectures", {"MixtralForCausalLM"}}, {"model_type", "mixtral"}, {"vocab_size", 32000},
         {"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_hidden_layers", L},
         {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"num_local_experts", 8},
         {"num_experts_per_tok", 2}, {"hidden_act", "silu"}, {"max_position_embeddings", 32768},
         {"rms_norm_eps", 1e-5}, {"rope_theta", 1000000.0}, {"sliding_window", nullptr}};
  } else if (arch == "kimi_linear") {
    json la = {{"head_dim", 128}, {"num_heads", 32}, {"short_conv_kernel_size", 4}};
    attn_lists(la, L);
    c = {{"architectures", {"KimiLinearForCausalLM"}}, {"model_type", "kimi_linear"}, {"vocab_size", 163840},
         {"hidden_size", 2304}, {"intermediate_size", 9216}, {"moe_intermediate_size", 1024},
         {"num_hidden_layers", L}, {"num_attention_heads", 32}, {"num_key_value_heads", 32},
         {"kv_lora_rank", 512}, {"q_lora_rank", nullptr}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
         {"v_head_dim", 128}, {"mla_use_nope", true}, {"linear_attn_config", la}, {"num_experts", 64},
         {"num_experts_per_token", 8}, {"num_shared_experts", 1}, {"moe_renormalize", true},
         {"moe_router_activation_func", "sigmoid"}, {"num_expert_group", 1}, {"topk_group", 1},
         {"use_grouped_topk", true}, {"routed_scaling_factor", 2.446}, {"first_k_dense_replace", 1},
         {"moe_layer_freq", 1}, {"hidden_act", "silu"}, {"model_max_length", 1048576}, {"rms_norm_eps", 1e-5},
         {"rope_theta", 10000.0}, {"rope_scaling", nullptr}, {"pad_token_id", 1}};
  } else if (arch == "kimi_k3") {
    json la = {{"gate_lower_bound", -5.0}, {"head_dim", 128}, {"num_heads", 96}, {"short_conv_kernel_size", 4},
               {"use_full_rank_gate", true}};
    attn_lists(la, L);
    json t = {{"architectures", {"KimiLinearForCausalLM"}}, {"model_type", "kimi_linear"},
              {"activation_situ_beta", 4.0}, {"activation_situ_linear_beta", 25.0}, {"attn_res_block_size", 12},
              {"bos_token_id", 0}, {"eos_token_id", 1}, {"first_k_dense_replace", 1}, {"hidden_act", "situ"},
              {"hidden_size", 7168}, {"initializer_range", 0.02}, {"intermediate_size", 33792},
              {"kv_lora_rank", 512}, {"latent_moe_use_norm", true}, {"linear_attn_config", la},
              {"max_position_embeddings", 1048576}, {"mla_use_nope", true}, {"mla_use_output_gate", true},
              {"moe_intermediate_size", 3072}, {"moe_layer_freq", 1}, {"moe_renormalize", true},
              {"moe_router_activation_func", "sigmoid"}, {"num_attention_heads", 96}, {"num_expert_group", 1},
              {"num_experts", 64}, {"num_experts_per_token", 16}, {"num_hidden_layers", L},
              {"num_key_value_heads", 96}, {"num_nextn_predict_layers", 0}, {"num_shared_experts", 2},
              {"q_lora_rank", 1536}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
              {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"routed_expert_hidden_size", 3584},
              {"routed_scaling_factor", 1.0}, {"tie_word_embeddings", false}, {"topk_group", 1},
              {"topk_method", "noaux_tc"}, {"use_cache", true}, {"use_grouped_topk", true},
              {"v_head_dim", 128}, {"vocab_size", 163840}};
    return {{"architectures", {"KimiK3ForConditionalGeneration"}}, {"bos_token_id", 0}, {"dtype", "bfloat16"},
            {"eos_token_id", 1}, {"model_type", "kimi_k3"}, {"text_config", t}, {"tie_word_embeddings", false}};
  } else {
    std::string known;
    for (const auto& a : synth_architectures()) known += (known.empty() ? "" : ", ") + a;
    fail("--arch: '{}' is not one synth writes ({})", arch, known);
  }
  for (const auto& [k, v] : common.items()) c[k] = v;
  return c;
}

// Sets a dotted key ("text_config.linear_attn_config.head_dim").
void set_path(json& j, const std::string& path, const json& v) {
  json* cur = &j;
  size_t i = 0;
  while (true) {
    const size_t dot = path.find('.', i);
    const std::string key = path.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
    if (key.empty()) fail("--set: '{}' is not a dotted config key", path);
    if (!cur->is_object()) fail("--set: '{}' goes through a value that is not an object", path);
    if (dot == std::string::npos) {
      (*cur)[key] = v;
      return;
    }
    cur = &(*cur)[key];
    i = dot + 1;
  }
}

}  // namespace

std::string synth_encoding(const SynthOptions& o) { return o.encoding.empty() ? default_encoding(o.arch) : o.encoding; }

std::vector<std::string> synth_architectures() { return {"deepseek_v3", "qwen3_moe", "mixtral", "kimi_linear", "kimi_k3"}; }

json synth_config(const SynthOptions& o, int64_t L) {
  if (L < 1 || L > 1000) fail("--layers: {} is out of range [1, 1000]", L);
  const std::string arch = o.arch;
  json c = base_config(arch, L);
  const std::string enc = synth_encoding(o);
  if (enc != "bf16" && enc != "fp8" && enc != "int4" && enc != "mxfp4")
    fail("--encoding: '{}' is not one of bf16, fp8, int4, mxfp4", enc);
  if (arch == "kimi_k3" && enc != "mxfp4")
    fail("--encoding {}: Kimi K3 publishes its routed experts in mxfp4 only; drop --encoding", enc);
  json& t = arch == "kimi_k3" ? c["text_config"] : c;  // where the text model's keys live
  auto set_if = [&](int64_t v, std::initializer_list<const char*> keys, const char* flag) {
    if (v == 0) return;
    if (v < 0) fail("{}: {} must be positive", flag, v);
    for (const char* k : keys) t[k] = v;
  };
  const char* experts_key = arch == "deepseek_v3" ? "n_routed_experts" : arch == "mixtral" ? "num_local_experts" : "num_experts";
  const char* topk_key = arch == "kimi_linear" || arch == "kimi_k3" ? "num_experts_per_token" : "num_experts_per_tok";
  set_if(o.experts, {experts_key}, "--experts");
  set_if(o.hidden, {"hidden_size"}, "--hidden");
  set_if(o.vocab, {"vocab_size"}, "--vocab");
  set_if(o.inter, {"intermediate_size"}, "--inter");
  if (o.moe_inter) {
    if (arch == "mixtral") fail("--moe-inter: mixtral's experts use --inter (intermediate_size)");
    set_if(o.moe_inter, {"moe_intermediate_size"}, "--moe-inter");
  }
  if (o.latent) {
    if (arch != "kimi_k3") fail("--latent is for kimi_k3 (routed_expert_hidden_size) only");
    set_if(o.latent, {"routed_expert_hidden_size"}, "--latent");
  }
  if (o.heads) {
    set_if(o.heads, {"num_attention_heads"}, "--heads");
    if (t.contains("linear_attn_config")) t["linear_attn_config"]["num_heads"] = o.heads;
    const int64_t kv = t.value("num_key_value_heads", o.heads);
    t["num_key_value_heads"] = (arch == "qwen3_moe" || arch == "mixtral") && o.heads % std::min(kv, o.heads) == 0
                                   ? std::min(kv, o.heads)
                                   : o.heads;
  }
  // Experts and top-k: the default top-k is capped by the expert count; group-limited
  // routing falls back to one group when the groups no longer divide the experts.
  const int64_t E = t[experts_key].get<int64_t>();
  int64_t K = o.top_k ? o.top_k : std::min<int64_t>(t[topk_key].get<int64_t>(), E);
  if (K < 1 || K > E) fail("--top-k: {} must be between 1 and the {} experts", K, E);
  t[topk_key] = K;
  const char* group_key = arch == "deepseek_v3" ? "n_group" : "num_expert_group";
  if (t.contains(group_key)) {
    const int64_t G = t[group_key].get<int64_t>(), TG = t["topk_group"].get<int64_t>();
    // DeepSeek scores a group by its two best experts: at least two per group.
    if (E % G != 0 || E / G < 2 || (E / G) * TG < K) {
      t[group_key] = 1;
      t["topk_group"] = 1;
    }
  }
  const json q = quant_config(arch, enc);
  if (!q.is_null()) t["quantization_config"] = q;
  for (const auto& [key, value] : o.set) set_path(c, key, value);
  return c;
}

}  // namespace deltafin
