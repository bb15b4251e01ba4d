// kimi_linear (Kimi-Linear-48B-A3B, transformers' kimi_linear): KDA layers
// and MLA layers without positional encoding (layer types from
// linear_attn_config, one-based), sigmoid noaux_tc MoE with shared experts,
// dense first layers. Published names: self_attn.{q,k,v}_conv1d, f_a_proj,
// f_b_proj, A_log, dt_bias, b_proj, g_a_proj, g_b_proj, o_norm;
// block_sparse_moe.experts.E.w1/w2/w3, block_sparse_moe.gate.
#include <cmath>

#include "model/arch_common.h"
#include "model/architectures.h"

namespace deltafin {

using namespace arch;

namespace {

// "full_attention" / "linear_attention" per layer.
std::vector<std::string> layer_types(const ModelConfig& c, int64_t L) {
  std::vector<std::string> t(L);
  const auto& j = c.json();
  if (j.contains("layer_types") && j["layer_types"].is_array() && j["layer_types"].size() == static_cast<size_t>(L)) {
    for (int64_t l = 0; l < L; ++l) t[l] = j["layer_types"][l].get<std::string>();
    return t;
  }
  const nlohmann::json* la = c.object("linear_attn_config");
  if (la && la->contains("full_attn_layers") && la->contains("kda_layers")) {
    for (const char* key : {"full_attn_layers", "kda_layers"})
      for (const auto& v : (*la)[key]) {
        int64_t one_based = v.get<int64_t>();
        if (one_based < 1 || one_based > L) fail("{}: linear_attn_config.{} lists layer {} (layers are 1..{})", c.label(), key, one_based, L);
        t[one_based - 1] = std::string(key) == "full_attn_layers" ? "full_attention" : "linear_attention";
      }
    for (int64_t l = 0; l < L; ++l)
      if (t[l].empty()) fail("{}: layer {} is in neither full_attn_layers nor kda_layers", c.label(), l + 1);
    return t;
  }
  for (int64_t l = 0; l < L; ++l) t[l] = (l && l % 4 == 0) ? "full_attention" : "linear_attention";
  return t;
}

}  // namespace

std::unique_ptr<DecoderModel> build_kimi_linear(const Checkpoint& ck, const ModelOptions& opts) {
  const ModelConfig& c = ck.config();
  auto m = std::make_unique<DecoderModel>();
  m->info.arch = "kimi_linear";
  const int64_t H = m->info.hidden = c.i64({"hidden_size"});
  m->info.vocab = c.i64({"vocab_size"});
  const int64_t L = m->info.layers = c.i64({"num_hidden_layers"});
  const double eps = c.f64({"rms_norm_eps"}, 1e-5);
  const int64_t nh = c.i64({"num_attention_heads"});
  const int64_t q_lora = c.i64({"q_lora_rank"}, 0), kv_lora = c.i64({"kv_lora_rank"});
  const int64_t nope = c.i64({"qk_nope_head_dim"}), rope_dim = c.i64({"qk_rope_head_dim"});
  const int64_t vdim = c.i64({"v_head_dim"});
  const int64_t E = c.i64({"num_experts", "num_local_experts"});
  const int64_t K = c.i64({"num_experts_per_token", "num_experts_per_tok"});
  const int64_t n_shared = c.i64({"num_shared_experts", "n_shared_experts"}, 1);
  const int64_t moe_inter = c.i64({"moe_intermediate_size"}), dense_inter = c.i64({"intermediate_size"});
  const nlohmann::json* la = c.object("linear_attn_config");
  auto la_int = [&](const char* k, const char* top, int64_t d) {
    if (la && la->contains(k)) return (*la)[k].get<int64_t>();
    return c.i64({top}, d);
  };
  const int64_t kda_heads = la_int("num_heads", "linear_num_heads", 32);
  const int64_t kda_dim = la_int("head_dim", "linear_head_dim", 128);
  const int64_t conv_k = la_int("short_conv_kernel_size", "linear_conv_kernel_dim", 4);
  check_range(c, "num_hidden_layers", L, 1, 1000);
  check_range(c, "num_experts_per_token", K, 1, E);
  check_range(c, "short_conv_kernel_size", conv_k, 1, 64);
  const auto types = layer_types(c, L);
  std::vector<bool> sparse(L);
  if (c.json().contains("mlp_layer_types") && c.json()["mlp_layer_types"].is_array()) {
    for (int64_t l = 0; l < L; ++l) sparse[l] = c.json()["mlp_layer_types"].at(l).get<std::string>() == "sparse";
  } else {
    const int64_t first_dense = c.i64({"first_k_dense_replace"}, 1);
    for (int64_t l = 0; l < L; ++l) sparse[l] = l >= first_dense;
  }
  load_embeddings_and_head(ck, *m, "", eps);
  m->resident = std::make_unique<ResidentExperts>();
  m->resident->table.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    DecoderLayer D;
    D.in_norm = norm(ck, p + "input_layernorm.weight", H, eps);
    D.post_norm = norm(ck, p + "post_attention_layernorm.weight", H, eps);
    if (types[l] == "full_attention") {
      auto at = mla_attention(ck, a, {nh, q_lora, kv_lora, nope, rope_dim, vdim}, H);
      D.attn = std::move(at);  // no rope: Kimi's MLA is NoPE
    } else if (types[l] == "linear_attention") {
      auto kd = kda_attention(ck, a, {kda_heads, kda_dim, conv_k, /*full_rank_gate=*/false, std::nullopt}, H, eps);
      D.attn = std::move(kd);
    } else {
      fail("{}: layer {} has unknown type '{}'", c.label(), l, types[l]);
    }
    if (sparse[l]) {
      const std::string mp = ck.find(p + "block_sparse_moe.gate.weight") ? p + "block_sparse_moe." : p + "mlp.";
      auto f = std::make_unique<MoeFfn>();
      f->layer = static_cast<int>(l);
      f->expert_inter = moe_inter;
      f->router = router(ck, mp + "gate",
                         {Router::Kind::SigmoidNoAux, E, K, c.i64({"num_expert_group", "n_group"}, 1),
                          c.i64({"topk_group"}, 1), c.boolean({"moe_renormalize", "norm_topk_prob"}, true),
                          static_cast<float>(c.f64({"routed_scaling_factor"}, 1.0))},
                         H);
      if (n_shared > 0) f->shared = dense_mlp(ck, mp + "shared_experts", H, moe_inter * n_shared);
      append_experts(ck, mp + "experts.", E, H, moe_inter, "w1", "w3", "w2", m->resident->table[l]);
      D.moe = std::move(f);
      ++m->info.moe_layers;
    } else {
      D.mlp = dense_mlp(ck, p + "mlp", H, dense_inter);
    }
    m->layers.push_back(std::move(D));
  }
  finish(*m, ck, opts, E, K);
  return m;
}

}  // namespace deltafin
