// kimi_k3 (Kimi K3, moonshotai/Kimi-K3): config.json model_type "kimi_k3" with
// the text model in "text_config" (model_type "kimi_linear"), tensors under
// "language_model."; vision_tower.* and mm_projector.* are not read.
// On top of kimi_linear: attention residuals across blocks of
// attn_res_block_size layers, KDA with the lower-bounded gate (one A_log per
// head) and a full-rank output gate, gated NoPE MLA with q_lora, a latent MoE
// (routed_expert_down_proj / routed_expert_norm / routed_expert_up_proj) of
// MXFP4 experts, and SiTU instead of SiLU everywhere. docs/kimi_k3.md says
// which source each choice follows.
#include <cmath>

#include "model/arch_common.h"
#include "model/architectures.h"

namespace deltafin {

using namespace arch;

namespace {

const char* const kPrefix = "language_model.";

// true per layer for KDA (linear attention), from the one-based lists of linear_attn_config.
std::vector<bool> kda_layers(const ModelConfig& la, int64_t L) {
  std::vector<int> kind(L, -1);
  for (const char* key : {"full_attn_layers", "kda_layers"}) {
    const auto* list = la.json().contains(key) ? &la.json()[key] : nullptr;
    if (!list || !list->is_array()) fail("{}: \"{}\" is missing or not a list", la.label(), key);
    for (const auto& v : *list) {
      const int64_t one_based = v.get<int64_t>();
      if (one_based < 1 || one_based > L) fail("{}: {} lists layer {} (layers are 1..{})", la.label(), key, one_based, L);
      kind[one_based - 1] = std::string(key) == "kda_layers" ? 1 : 0;
    }
  }
  std::vector<bool> kda(L);
  for (int64_t l = 0; l < L; ++l) {
    if (kind[l] < 0) fail("{}: layer {} is in neither full_attn_layers nor kda_layers", la.label(), l + 1);
    kda[l] = kind[l] == 1;
  }
  return kda;
}

AttnResWeights attn_res_weights(const Checkpoint& ck, const std::string& prefix, int64_t H, double eps) {
  AttnResWeights r;
  const std::vector<float> nw = ck.floats(prefix + "_norm.weight", H);
  const std::vector<float> pw = ck.floats(prefix + "_proj.weight", H);  // [1, H]
  r.w.resize(H);
  for (int64_t i = 0; i < H; ++i) r.w[i] = nw[i] * pw[i];  // exact for bf16 inputs
  r.eps = static_cast<float>(eps);
  return r;
}

// The text config of a kimi_k3 config.json, validated, with the dimensions
// the builder and the tensor plan share.
struct K3Shape {
  ModelConfig c, la;  // text_config, text_config.linear_attn_config
  int64_t H, V, L, nh, q_lora, kv_lora, nope, rope_dim, vdim, E, K, n_shared, moe_inter, dense_inter,
      first_dense, moe_freq, latent, block, kda_heads, kda_dim, conv_k;
  double eps;
  bool mla_gate, latent_norm, full_rank_gate;
  std::vector<bool> kda;

  explicit K3Shape(const ModelConfig& top) {
    const nlohmann::json* tj = top.object("text_config");
    if (!tj) fail("{}: model_type kimi_k3 needs a \"text_config\" object", top.label());
    c = ModelConfig(*tj, top.label() + " text_config");
    const std::string text_type = c.str({"model_type"}, "");
    if (text_type != "kimi_linear") fail("{}: model_type is '{}', expected 'kimi_linear'", c.label(), text_type);
    const nlohmann::json* laj = c.object("linear_attn_config");
    if (!laj) fail("{}: \"linear_attn_config\" is missing", c.label());
    la = ModelConfig(*laj, c.label() + " linear_attn_config");
    H = c.i64({"hidden_size"});
    V = c.i64({"vocab_size"});
    L = c.i64({"num_hidden_layers"});
    eps = c.f64({"rms_norm_eps"}, 1e-6);
    nh = c.i64({"num_attention_heads"});
    q_lora = c.i64({"q_lora_rank"}, 0);
    kv_lora = c.i64({"kv_lora_rank"});
    nope = c.i64({"qk_nope_head_dim"});
    rope_dim = c.i64({"qk_rope_head_dim"});
    vdim = c.i64({"v_head_dim"});
    mla_gate = c.boolean({"mla_use_output_gate"}, false);
    E = c.i64({"num_experts"});
    K = c.i64({"num_experts_per_token"});
    n_shared = c.i64({"num_shared_experts"}, 0);
    moe_inter = c.i64({"moe_intermediate_size"});
    dense_inter = c.i64({"intermediate_size"});
    first_dense = c.i64({"first_k_dense_replace"}, 0);
    moe_freq = c.i64({"moe_layer_freq"}, 1);
    latent = c.i64({"routed_expert_hidden_size"}, 0);
    latent_norm = c.boolean({"latent_moe_use_norm"}, false);
    block = c.i64({"attn_res_block_size"}, 0);
    kda_heads = la.i64({"num_heads"});
    kda_dim = la.i64({"head_dim"});
    conv_k = la.i64({"short_conv_kernel_size"}, 4);
    full_rank_gate = la.boolean({"use_full_rank_gate"}, false);
    check_range(c, "num_hidden_layers", L, 1, 1000);
    check_range(c, "num_experts_per_token", K, 1, E);
    check_range(la, "short_conv_kernel_size", conv_k, 1, 64);
    check_range(c, "moe_layer_freq", moe_freq, 1, L);
    if (block < 0) fail("{}: \"attn_res_block_size\" = {} is negative", c.label(), block);
    kda = kda_layers(la, L);
  }
  bool is_moe(int64_t l) const { return l >= first_dense && l % moe_freq == 0; }
};

}  // namespace

std::unique_ptr<DecoderModel> build_kimi_k3(const Checkpoint& ck, const ModelOptions& opts) {
  const K3Shape k3(ck.config());
  const ModelConfig& c = k3.c;
  const ModelConfig& la = k3.la;
  const std::string P = kPrefix;

  auto m = std::make_unique<DecoderModel>();
  m->info.arch = "kimi_k3";
  const int64_t H = m->info.hidden = k3.H;
  m->info.vocab = k3.V;
  const int64_t L = m->info.layers = k3.L;
  const double eps = k3.eps;
  const int64_t nh = k3.nh, q_lora = k3.q_lora, kv_lora = k3.kv_lora, nope = k3.nope, rope_dim = k3.rope_dim;
  const int64_t vdim = k3.vdim, E = k3.E, K = k3.K, n_shared = k3.n_shared, moe_inter = k3.moe_inter;
  const int64_t dense_inter = k3.dense_inter, latent = k3.latent, block = k3.block;
  const int64_t kda_heads = k3.kda_heads, kda_dim = k3.kda_dim, conv_k = k3.conv_k;
  const bool mla_gate = k3.mla_gate, latent_norm = k3.latent_norm, full_rank_gate = k3.full_rank_gate;

  // SiTU (official _get_situ_activation_params: beta defaults to 1, linear_beta may be absent).
  const std::string act_name = c.str({"hidden_act"}, "silu");
  Activation act = Activation::SiLU;
  if (act_name == "situ") act = Activation::SiTU;
  else if (act_name != "silu") fail("{}: hidden_act '{}' is not supported (situ and silu are)", c.label(), act_name);
  const float beta = static_cast<float>(c.f64({"activation_situ_beta"}, 1.0));
  const float linear_beta = static_cast<float>(c.f64({"activation_situ_linear_beta"}, 0.0));
  auto with_act = [&](DenseMlp mlp) {
    mlp.act = act;
    mlp.act_beta = beta;
    mlp.act_linear_beta = linear_beta;
    return mlp;
  };

  const std::vector<bool>& kda = k3.kda;
  load_embeddings_and_head(ck, *m, P, eps);
  m->attn_res_block = block;
  if (block > 0) m->output_res = attn_res_weights(ck, P + "model.output_attn_res", H, eps);
  m->resident = std::make_unique<ResidentExperts>();
  m->resident->table.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = P + "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    DecoderLayer D;
    D.in_norm = norm(ck, p + "input_layernorm.weight", H, eps);
    D.post_norm = norm(ck, p + "post_attention_layernorm.weight", H, eps);
    if (block > 0) {
      D.attn_res = attn_res_weights(ck, p + "self_attention_res", H, eps);
      D.mlp_res = attn_res_weights(ck, p + "mlp_res", H, eps);
    }
    if (!kda[l]) {
      auto at = mla_attention(ck, a, {nh, q_lora, kv_lora, nope, rope_dim, vdim}, H);
      if (mla_gate) at->out_gate = linear(ck, a + "g_proj", nh * vdim, H);
      D.attn = std::move(at);  // no rope anywhere (mla_use_nope)
    } else {
      std::optional<float> lower;
      if (la.has({"gate_lower_bound"})) lower = static_cast<float>(la.f64({"gate_lower_bound"}));
      auto kd = kda_attention(ck, a, {kda_heads, kda_dim, conv_k, full_rank_gate, lower}, H, eps);
      D.attn = std::move(kd);
    }
    if (k3.is_moe(l)) {
      const std::string mp = p + "block_sparse_moe.";
      const int64_t He = latent > 0 ? latent : H;  // the experts' input width
      auto f = std::make_unique<MoeFfn>();
      f->layer = static_cast<int>(l);
      f->expert_inter = moe_inter;
      f->act = act;
      f->act_beta = beta;
      f->act_linear_beta = linear_beta;
      f->router = router(ck, mp + "gate",
                         {Router::Kind::SigmoidNoAux, E, K, c.i64({"num_expert_group"}, 1), c.i64({"topk_group"}, 1),
                          c.boolean({"moe_renormalize"}, true) && K > 1,
                          static_cast<float>(c.f64({"routed_scaling_factor"}, 1.0))},
                         H);
      if (latent > 0) {
        f->latent_down = linear(ck, mp + "routed_expert_down_proj", latent, H);
        f->latent_up = linear(ck, mp + "routed_expert_up_proj", H, latent);
        if (latent_norm) f->latent_norm = norm(ck, mp + "routed_expert_norm.weight", latent, eps);
      }
      if (n_shared > 0) f->shared = with_act(dense_mlp(ck, mp + "shared_experts", H, moe_inter * n_shared));
      append_experts(ck, mp + "experts.", E, He, moe_inter, "w1", "w3", "w2", m->resident->table[l]);
      D.moe = std::move(f);
      ++m->info.moe_layers;
    } else {
      D.mlp = with_act(dense_mlp(ck, p + "mlp", H, dense_inter));
    }
    m->layers.push_back(std::move(D));
  }
  finish(*m, ck, opts, E, K);
  // The vision tower and projector are not part of the text model.
  for (const auto& [name, t] : ck.all_tensors())
    if (!name.starts_with(P)) {
      m->info.spine_bytes -= t->bytes;
      m->info.spine_params -= static_cast<uint64_t>(t->numel());
    }
  return m;
}

std::vector<TensorSpec> kimi_k3_tensors(const ModelConfig& top) {
  const K3Shape k(top);
  const std::string P = kPrefix;
  std::vector<TensorSpec> t;
  auto add = [&](const std::string& name, DType d, std::vector<int64_t> shape) {
    t.push_back({P + name, d, std::move(shape)});
  };
  const DType B = DType::BF16, F = DType::F32;
  const int64_t H = k.H, D = k.kda_heads * k.kda_dim, dk = k.kda_dim;
  add("lm_head.weight", B, {k.V, H});
  add("model.embed_tokens.weight", B, {k.V, H});
  add("model.norm.weight", B, {H});
  if (k.block > 0) {
    add("model.output_attn_res_norm.weight", B, {H});
    add("model.output_attn_res_proj.weight", B, {1, H});
  }
  // MXFP4 (compressed-tensors mxfp4-pack-quantized): [out, in/2] U8 + [out, in/32] U8.
  auto mxfp4 = [&](const std::string& name, int64_t out, int64_t in) {
    if (in % 32 != 0) fail("{}: an MXFP4 expert matrix needs an input size divisible by 32, not {}", k.c.label(), in);
    add(name + ".weight_packed", DType::U8, {out, in / 2});
    add(name + ".weight_scale", DType::U8, {out, in / 32});
  };
  for (int64_t l = 0; l < k.L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    add(p + "input_layernorm.weight", B, {H});
    add(p + "post_attention_layernorm.weight", B, {H});
    if (k.block > 0)
      for (const char* site : {"self_attention_res", "mlp_res"}) {
        add(p + site + "_norm.weight", B, {H});
        add(p + site + "_proj.weight", B, {1, H});
      }
    if (k.kda[l]) {
      for (const char* x : {"q", "k", "v"}) {
        add(a + x + "_proj.weight", B, {D, H});
        add(a + x + "_conv1d.weight", F, {D, 1, k.conv_k});
      }
      add(a + "f_a_proj.weight", B, {dk, H});
      add(a + "f_b_proj.weight", B, {D, dk});
      add(a + "A_log", F, {dk});  // as published: [head_dim], one value per head used
      add(a + "dt_bias", F, {D});
      add(a + "b_proj.weight", B, {k.kda_heads, H});
      if (k.full_rank_gate) {
        add(a + "g_proj.weight", B, {D, H});
      } else {
        add(a + "g_a_proj.weight", B, {dk, H});
        add(a + "g_b_proj.weight", B, {D, dk});
      }
      add(a + "o_norm.weight", F, {dk});
      add(a + "o_proj.weight", B, {H, D});
    } else {
      const int64_t qd = k.nope + k.rope_dim;
      if (k.q_lora > 0) {
        add(a + "q_a_proj.weight", B, {k.q_lora, H});
        add(a + "q_a_layernorm.weight", B, {k.q_lora});
        add(a + "q_b_proj.weight", B, {k.nh * qd, k.q_lora});
      } else {
        add(a + "q_proj.weight", B, {k.nh * qd, H});
      }
      add(a + "kv_a_proj_with_mqa.weight", B, {k.kv_lora + k.rope_dim, H});
      add(a + "kv_a_layernorm.weight", B, {k.kv_lora});
      add(a + "kv_b_proj.weight", B, {k.nh * (k.nope + k.vdim), k.kv_lora});
      if (k.mla_gate) add(a + "g_proj.weight", B, {k.nh * k.vdim, H});
      add(a + "o_proj.weight", B, {H, k.nh * k.vdim});
    }
    if (k.is_moe(l)) {
      const std::string m = p + "block_sparse_moe.";
      const int64_t He = k.latent > 0 ? k.latent : H, S = k.moe_inter * k.n_shared;
      add(m + "gate.weight", B, {k.E, H});
      add(m + "gate.e_score_correction_bias", F, {k.E});
      if (k.latent > 0) {
        add(m + "routed_expert_down_proj.weight", B, {k.latent, H});
        if (k.latent_norm) add(m + "routed_expert_norm.weight", B, {k.latent});
        add(m + "routed_expert_up_proj.weight", B, {H, k.latent});
      }
      if (S > 0) {
        add(m + "shared_experts.gate_proj.weight", B, {S, H});
        add(m + "shared_experts.up_proj.weight", B, {S, H});
        add(m + "shared_experts.down_proj.weight", B, {H, S});
      }
      for (int64_t e = 0; e < k.E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        mxfp4(x + "w1", k.moe_inter, He);
        mxfp4(x + "w2", He, k.moe_inter);
        mxfp4(x + "w3", k.moe_inter, He);
      }
    } else {
      add(p + "mlp.gate_proj.weight", B, {k.dense_inter, H});
      add(p + "mlp.up_proj.weight", B, {k.dense_inter, H});
      add(p + "mlp.down_proj.weight", B, {H, k.dense_inter});
    }
  }
  return t;
}

}  // namespace deltafin
