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

}  // namespace

std::unique_ptr<DecoderModel> build_kimi_k3(const Checkpoint& ck, const ModelOptions& opts) {
  const ModelConfig& top = ck.config();
  const nlohmann::json* tj = top.object("text_config");
  if (!tj) fail("{}: model_type kimi_k3 needs a \"text_config\" object", top.label());
  const ModelConfig c(*tj, top.label() + " text_config");
  const std::string text_type = c.str({"model_type"}, "");
  if (text_type != "kimi_linear") fail("{}: model_type is '{}', expected 'kimi_linear'", c.label(), text_type);
  const nlohmann::json* laj = c.object("linear_attn_config");
  if (!laj) fail("{}: \"linear_attn_config\" is missing", c.label());
  const ModelConfig la(*laj, c.label() + " linear_attn_config");
  const std::string P = kPrefix;

  auto m = std::make_unique<DecoderModel>();
  m->info.arch = "kimi_k3";
  const int64_t H = m->info.hidden = c.i64({"hidden_size"});
  m->info.vocab = c.i64({"vocab_size"});
  const int64_t L = m->info.layers = c.i64({"num_hidden_layers"});
  const double eps = c.f64({"rms_norm_eps"}, 1e-6);
  const int64_t nh = c.i64({"num_attention_heads"});
  const int64_t q_lora = c.i64({"q_lora_rank"}, 0), kv_lora = c.i64({"kv_lora_rank"});
  const int64_t nope = c.i64({"qk_nope_head_dim"}), rope_dim = c.i64({"qk_rope_head_dim"});
  const int64_t vdim = c.i64({"v_head_dim"});
  const bool mla_gate = c.boolean({"mla_use_output_gate"}, false);
  const int64_t E = c.i64({"num_experts"}), K = c.i64({"num_experts_per_token"});
  const int64_t n_shared = c.i64({"num_shared_experts"}, 0);
  const int64_t moe_inter = c.i64({"moe_intermediate_size"}), dense_inter = c.i64({"intermediate_size"});
  const int64_t first_dense = c.i64({"first_k_dense_replace"}, 0), moe_freq = c.i64({"moe_layer_freq"}, 1);
  const int64_t latent = c.i64({"routed_expert_hidden_size"}, 0);
  const bool latent_norm = c.boolean({"latent_moe_use_norm"}, false);
  const int64_t block = c.i64({"attn_res_block_size"}, 0);
  const int64_t kda_heads = la.i64({"num_heads"}), kda_dim = la.i64({"head_dim"});
  const int64_t conv_k = la.i64({"short_conv_kernel_size"}, 4);
  const bool full_rank_gate = la.boolean({"use_full_rank_gate"}, false);
  check_range(c, "num_hidden_layers", L, 1, 1000);
  check_range(c, "num_experts_per_token", K, 1, E);
  check_range(la, "short_conv_kernel_size", conv_k, 1, 64);
  check_range(c, "moe_layer_freq", moe_freq, 1, L);
  if (block < 0) fail("{}: \"attn_res_block_size\" = {} is negative", c.label(), block);

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

  const std::vector<bool> kda = kda_layers(la, L);
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
      auto at = std::make_unique<MlaAttention>();
      at->n_heads = nh;
      at->nope = nope;
      at->rope_dim = rope_dim;
      at->v_dim = vdim;
      at->kv_lora = kv_lora;
      // q_a / kv_a layernorms: KimiRMSNorm's default eps 1e-6, not rms_norm_eps.
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
      if (mla_gate) at->out_gate = linear(ck, a + "g_proj", nh * vdim, H);
      at->scale = static_cast<float>(std::pow(static_cast<double>(nope + rope_dim), -0.5));
      D.attn = std::move(at);  // no rope anywhere (mla_use_nope)
    } else {
      const int64_t Dm = kda_heads * kda_dim;
      auto kd = std::make_unique<KdaAttention>();
      kd->n_heads = kda_heads;
      kd->head_dim = kda_dim;
      kd->conv_k = conv_k;
      kd->q = linear(ck, a + "q_proj", Dm, H);
      kd->k = linear(ck, a + "k_proj", Dm, H);
      kd->v = linear(ck, a + "v_proj", Dm, H);
      kd->q_conv = ck.floats(a + "q_conv1d.weight", Dm * conv_k);
      kd->k_conv = ck.floats(a + "k_conv1d.weight", Dm * conv_k);
      kd->v_conv = ck.floats(a + "v_conv1d.weight", Dm * conv_k);
      kd->f_a = linear(ck, a + "f_a_proj", kda_dim, H);
      kd->f_b = linear(ck, a + "f_b_proj", Dm, kda_dim);
      // A_log is published as [head_dim] (K3: 128 values for 96 heads); the
      // kernels read one value per head, A_log[h], so only the first heads count.
      const int64_t n_alog = ck.require(a + "A_log").numel();
      if (n_alog < kda_heads)
        fail("{}: tensor {}A_log has {} values, fewer than the {} KDA heads", ck.dir().string(), a, n_alog, kda_heads);
      kd->a_log = ck.floats(a + "A_log", n_alog);
      kd->a_log.resize(kda_heads);
      kd->dt_bias = ck.floats(a + "dt_bias", Dm);
      if (la.has({"gate_lower_bound"})) kd->gate_lower_bound = static_cast<float>(la.f64({"gate_lower_bound"}));
      kd->b = linear(ck, a + "b_proj", kda_heads, H);
      if (full_rank_gate) {
        kd->g_full = linear(ck, a + "g_proj", Dm, H);
      } else {
        kd->g_a = linear(ck, a + "g_a_proj", kda_dim, H);
        kd->g_b = linear(ck, a + "g_b_proj", Dm, kda_dim);
      }
      kd->o_norm = norm(ck, a + "o_norm.weight", kda_dim, eps);
      kd->o = linear(ck, a + "o_proj", H, Dm);
      D.attn = std::move(kd);
    }
    if (l >= first_dense && l % moe_freq == 0) {
      const std::string mp = p + "block_sparse_moe.";
      const int64_t He = latent > 0 ? latent : H;  // the experts' input width
      auto f = std::make_unique<MoeFfn>();
      f->layer = static_cast<int>(l);
      f->expert_inter = moe_inter;
      f->act = act;
      f->act_beta = beta;
      f->act_linear_beta = linear_beta;
      Router& r = f->router;
      r.kind = Router::Kind::SigmoidNoAux;
      r.weight = linear(ck, mp + "gate", E, H);
      if (ck.find(mp + "gate.e_score_correction_bias")) r.bias = ck.floats(mp + "gate.e_score_correction_bias", E);
      r.n_experts = E;
      r.top_k = K;
      r.n_group = c.i64({"num_expert_group"}, 1);
      r.topk_group = c.i64({"topk_group"}, 1);
      if (r.n_group < 1 || E % r.n_group != 0) fail("{}: num_experts {} not divisible by the group count {}", c.label(), E, r.n_group);
      check_range(c, "topk_group", r.topk_group, 1, r.n_group);
      r.norm_topk = c.boolean({"moe_renormalize"}, true) && K > 1;
      r.scaling = static_cast<float>(c.f64({"routed_scaling_factor"}, 1.0));
      if (latent > 0) {
        f->latent_down = linear(ck, mp + "routed_expert_down_proj", latent, H);
        f->latent_up = linear(ck, mp + "routed_expert_up_proj", H, latent);
        if (latent_norm) f->latent_norm = norm(ck, mp + "routed_expert_norm.weight", latent, eps);
      }
      if (n_shared > 0) f->shared = with_act(dense_mlp(ck, mp + "shared_experts", H, moe_inter * n_shared));
      for (int64_t e = 0; e < E; ++e)
        m->resident->table[l].push_back(expert(ck, mp + "experts." + std::to_string(e), He, moe_inter, "w1", "w3", "w2"));
      D.moe = std::move(f);
      ++m->info.moe_layers;
    } else {
      D.mlp = with_act(dense_mlp(ck, p + "mlp", H, dense_inter));
    }
    m->layers.push_back(std::move(D));
  }
  m->info.experts_per_layer = E;
  m->info.experts_per_token = K;
  m->count_bytes(ck, ".experts.");
  // The vision tower and projector are not part of the text model.
  for (const auto& [name, t] : ck.all_tensors())
    if (!name.starts_with(P)) {
      m->info.spine_bytes -= t->bytes;
      m->info.spine_params -= static_cast<uint64_t>(t->numel());
    }
  m->pool = opts.pool;
  m->experts = opts.experts ? opts.experts : m->resident.get();
  return m;
}

}  // namespace deltafin
