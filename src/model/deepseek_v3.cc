// deepseek_v3 / kimi_k2: MLA (with or without q_lora), YaRN rope applied to
// interleaved pairs (transformers' rope_interleave), sigmoid noaux_tc routing
// with e_score_correction_bias and group-limited top-k, shared experts,
// dense first layers. Published names: model.layers.L.mlp.experts.E.*_proj.
#include "model/architectures.h"

#include <cmath>

#include "model/arch_common.h"

namespace deltafin {

using namespace arch;

std::unique_ptr<DecoderModel> build_deepseek_v3(const Checkpoint& ck, const ModelOptions& opts) {
  const ModelConfig& c = ck.config();
  auto m = std::make_unique<DecoderModel>();
  m->info.arch = "deepseek_v3";
  const int64_t H = m->info.hidden = c.i64({"hidden_size"});
  m->info.vocab = c.i64({"vocab_size"});
  const int64_t L = m->info.layers = c.i64({"num_hidden_layers"});
  const int64_t nh = c.i64({"num_attention_heads"});
  const int64_t q_lora = c.i64({"q_lora_rank"}, 0), kv_lora = c.i64({"kv_lora_rank"});
  const int64_t nope = c.i64({"qk_nope_head_dim"}), rope_dim = c.i64({"qk_rope_head_dim"});
  const int64_t vdim = c.i64({"v_head_dim"});
  const double eps = c.f64({"rms_norm_eps"}, 1e-6);
  const int64_t E = c.i64({"n_routed_experts"}, 0), K = c.i64({"num_experts_per_tok"}, 0);
  const int64_t first_dense = c.i64({"first_k_dense_replace"}, 0), freq = c.i64({"moe_layer_freq"}, 1);
  const int64_t moe_inter = c.i64({"moe_intermediate_size"}, 0), dense_inter = c.i64({"intermediate_size"});
  const int64_t n_shared = c.i64({"n_shared_experts"}, 0);
  const std::string scoring = c.str({"scoring_func"}, "sigmoid");
  if (scoring != "sigmoid") fail("{}: scoring_func '{}' is not supported (sigmoid is)", c.label(), scoring);
  check_range(c, "num_hidden_layers", L, 1, 1000);
  if (E > 0) check_range(c, "num_experts_per_tok", K, 1, E);
  double mscale2 = 1.0;
  Rope rope = rope_from_config(c, rope_dim, &mscale2);
  rope.interleaved = c.boolean({"rope_interleave"}, true);
  load_embeddings_and_head(ck, *m, "", eps);
  m->resident = std::make_unique<ResidentExperts>();
  m->resident->table.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    DecoderLayer D;
    D.in_norm = norm(ck, p + "input_layernorm.weight", H, eps);
    D.post_norm = norm(ck, p + "post_attention_layernorm.weight", H, eps);
    auto a = mla_attention(ck, p + "self_attn.", {nh, q_lora, kv_lora, nope, rope_dim, vdim}, H, mscale2);
    a->rope = rope;
    D.attn = std::move(a);
    const bool is_moe = E > 0 && l >= first_dense && l % freq == 0;
    if (is_moe) {
      auto f = std::make_unique<MoeFfn>();
      f->layer = static_cast<int>(l);
      f->expert_inter = moe_inter;
      f->router = router(ck, p + "mlp.gate",
                         {Router::Kind::SigmoidNoAux, E, K, c.i64({"n_group"}, 1), c.i64({"topk_group"}, 1),
                          c.boolean({"norm_topk_prob"}, true),
                          static_cast<float>(c.f64({"routed_scaling_factor"}, 1.0))},
                         H);
      if (n_shared > 0) f->shared = dense_mlp(ck, p + "mlp.shared_experts", H, moe_inter * n_shared);
      append_experts(ck, p + "mlp.experts.", E, H, moe_inter, "gate_proj", "up_proj", "down_proj",
                     m->resident->table[l]);
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
