// qwen3_moe: GQA with per-head q/k RMSNorm, softmax top-k routing
// (norm_topk_prob), MoE every decoder_sparse_step layers except
// mlp_only_layers. Published names: model.layers.L.mlp.experts.E.*_proj.
#include <algorithm>

#include "model/arch_common.h"
#include "model/architectures.h"

namespace deltafin {

using namespace arch;

std::unique_ptr<DecoderModel> build_qwen3_moe(const Checkpoint& ck, const ModelOptions& opts) {
  const ModelConfig& c = ck.config();
  auto m = std::make_unique<DecoderModel>();
  m->info.arch = "qwen3_moe";
  const int64_t H = m->info.hidden = c.i64({"hidden_size"});
  m->info.vocab = c.i64({"vocab_size"});
  const int64_t L = m->info.layers = c.i64({"num_hidden_layers"});
  const double eps = c.f64({"rms_norm_eps"}, 1e-6);
  const int64_t E = c.i64({"num_experts"}, 0), K = c.i64({"num_experts_per_tok"}, 0);
  const int64_t step = c.i64({"decoder_sparse_step"}, 1);
  const int64_t moe_inter = c.i64({"moe_intermediate_size"}, 0), dense_inter = c.i64({"intermediate_size"});
  std::vector<int64_t> mlp_only;
  if (c.json().contains("mlp_only_layers") && c.json()["mlp_only_layers"].is_array())
    for (const auto& v : c.json()["mlp_only_layers"]) mlp_only.push_back(v.get<int64_t>());
  check_range(c, "num_hidden_layers", L, 1, 1000);
  if (E > 0) check_range(c, "num_experts_per_tok", K, 1, E);
  check_range(c, "decoder_sparse_step", step, 1, 1000);
  load_embeddings_and_head(ck, *m, "", eps);
  m->resident = std::make_unique<ResidentExperts>();
  m->resident->table.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    DecoderLayer D;
    D.in_norm = norm(ck, p + "input_layernorm.weight", H, eps);
    D.post_norm = norm(ck, p + "post_attention_layernorm.weight", H, eps);
    D.attn = gqa_attention(ck, p + "self_attn.", /*qk_norm=*/true);
    const bool is_moe = E > 0 && (l + 1) % step == 0 &&
                        std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end();
    if (is_moe) {
      auto f = std::make_unique<MoeFfn>();
      f->layer = static_cast<int>(l);
      f->expert_inter = moe_inter;
      f->router = router(ck, p + "mlp.gate", {Router::Kind::Softmax, E, K, 1, 1, c.boolean({"norm_topk_prob"}, false)}, H);
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
