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

// A conv1d weight [channels, 1, k] (or [channels, k]) as fp32.
std::vector<float> conv_weight(const Checkpoint& ck, const std::string& name, int64_t ch, int64_t k) {
  return ck.floats(name, ch * k);
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
      auto at = std::make_unique<MlaAttention>();
      at->n_heads = nh;
      at->nope = nope;
      at->rope_dim = rope_dim;
      at->v_dim = vdim;
      at->kv_lora = kv_lora;
      if (q_lora > 0) {
        at->q_a = linear(ck, a + "q_a_proj", q_lora, H);
        at->q_a_norm = norm(ck, a + "q_a_layernorm.weight", q_lora, 1e-6);
        at->q_b = linear(ck, a + "q_b_proj", nh * (nope + rope_dim), q_lora);
      } else {
        at->q_proj = linear(ck, a + "q_proj", nh * (nope + rope_dim), H);
      }
      at->kv_a = linear(ck, a + "kv_a_proj_with_mqa", kv_lora + rope_dim, H);
      at->kv_a_norm = norm(ck, a + "kv_a_layernorm.weight", kv_lora, 1e-6);
      at->kv_b = ck.linear(a + "kv_b_proj", nh * (nope + vdim), kv_lora);
      at->o = linear(ck, a + "o_proj", H, nh * vdim);
      at->scale = static_cast<float>(std::pow(static_cast<double>(nope + rope_dim), -0.5));
      D.attn = std::move(at);  // no rope: Kimi's MLA is NoPE
    } else if (types[l] == "linear_attention") {
      const int64_t Dm = kda_heads * kda_dim;
      auto kd = std::make_unique<KdaAttention>();
      kd->n_heads = kda_heads;
      kd->head_dim = kda_dim;
      kd->conv_k = conv_k;
      kd->q = linear(ck, a + "q_proj", Dm, H);
      kd->k = linear(ck, a + "k_proj", Dm, H);
      kd->v = linear(ck, a + "v_proj", Dm, H);
      kd->q_conv = conv_weight(ck, a + "q_conv1d.weight", Dm, conv_k);
      kd->k_conv = conv_weight(ck, a + "k_conv1d.weight", Dm, conv_k);
      kd->v_conv = conv_weight(ck, a + "v_conv1d.weight", Dm, conv_k);
      kd->f_a = linear(ck, a + "f_a_proj", kda_dim, H);
      kd->f_b = linear(ck, a + "f_b_proj", Dm, kda_dim);
      kd->a_log = ck.floats(a + "A_log", kda_heads);
      kd->dt_bias = ck.floats(a + "dt_bias", Dm);
      kd->b = linear(ck, a + "b_proj", kda_heads, H);
      kd->g_a = linear(ck, a + "g_a_proj", kda_dim, H);
      kd->g_b = linear(ck, a + "g_b_proj", Dm, kda_dim);
      kd->o_norm = norm(ck, a + "o_norm.weight", kda_dim, eps);
      kd->o = linear(ck, a + "o_proj", H, Dm);
      D.attn = std::move(kd);
    } else {
      fail("{}: layer {} has unknown type '{}'", c.label(), l, types[l]);
    }
    if (sparse[l]) {
      const std::string mp = ck.find(p + "block_sparse_moe.gate.weight") ? p + "block_sparse_moe." : p + "mlp.";
      auto f = std::make_unique<MoeFfn>();
      f->layer = static_cast<int>(l);
      f->expert_inter = moe_inter;
      Router& r = f->router;
      r.kind = Router::Kind::SigmoidNoAux;
      r.weight = linear(ck, mp + "gate", E, H);
      if (ck.find(mp + "gate.e_score_correction_bias")) r.bias = ck.floats(mp + "gate.e_score_correction_bias", E);
      r.n_experts = E;
      r.top_k = K;
      r.n_group = c.i64({"num_expert_group", "n_group"}, 1);
      r.topk_group = c.i64({"topk_group"}, 1);
      if (r.n_group < 1 || E % r.n_group != 0) fail("{}: num_experts {} not divisible by the group count {}", c.label(), E, r.n_group);
      check_range(c, "topk_group", r.topk_group, 1, r.n_group);
      r.norm_topk = c.boolean({"moe_renormalize", "norm_topk_prob"}, true);
      r.scaling = static_cast<float>(c.f64({"routed_scaling_factor"}, 1.0));
      if (n_shared > 0) f->shared = dense_mlp(ck, mp + "shared_experts", H, moe_inter * n_shared);
      for (int64_t e = 0; e < E; ++e)
        m->resident->table[l].push_back(expert(ck, mp + "experts." + std::to_string(e), H, moe_inter, "w1", "w3", "w2"));
      D.moe = std::move(f);
      ++m->info.moe_layers;
    } else {
      D.mlp = dense_mlp(ck, p + "mlp", H, dense_inter);
    }
    m->layers.push_back(std::move(D));
  }
  m->info.experts_per_layer = E;
  m->info.experts_per_token = K;
  m->count_bytes(ck, ".experts.");
  m->pool = opts.pool;
  m->experts = opts.experts ? opts.experts : m->resident.get();
  return m;
}

}  // namespace deltafin
