// mixtral: GQA attention, softmax top-2 routing renormalised over the chosen
// experts; published names model.layers.L.block_sparse_moe.experts.E.w1
// (gate), w3 (up), w2 (down), router block_sparse_moe.gate.
#include "model/arch_common.h"
#include "model/architectures.h"

namespace deltafin {

using namespace arch;

std::unique_ptr<DecoderModel> build_mixtral(const Checkpoint& ck, const ModelOptions& opts) {
  const ModelConfig& c = ck.config();
  auto m = std::make_unique<DecoderModel>();
  m->info.arch = "mixtral";
  const int64_t H = m->info.hidden = c.i64({"hidden_size"});
  m->info.vocab = c.i64({"vocab_size"});
  const int64_t L = m->info.layers = c.i64({"num_hidden_layers"});
  const double eps = c.f64({"rms_norm_eps"}, 1e-5);
  const int64_t E = c.i64({"num_local_experts"}), K = c.i64({"num_experts_per_tok"});
  const int64_t inter = c.i64({"intermediate_size"});
  check_range(c, "num_hidden_layers", L, 1, 1000);
  check_range(c, "num_experts_per_tok", K, 1, E);
  load_embeddings_and_head(ck, *m, "", eps);
  m->resident = std::make_unique<ResidentExperts>();
  m->resident->table.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    DecoderLayer D;
    D.in_norm = norm(ck, p + "input_layernorm.weight", H, eps);
    D.post_norm = norm(ck, p + "post_attention_layernorm.weight", H, eps);
    D.attn = gqa_attention(ck, p + "self_attn.", /*qk_norm=*/false);
    auto f = std::make_unique<MoeFfn>();
    f->layer = static_cast<int>(l);
    f->expert_inter = inter;
    f->router = router(ck, p + "block_sparse_moe.gate", {Router::Kind::Softmax, E, K, 1, 1, true}, H);
    append_experts(ck, p + "block_sparse_moe.experts.", E, H, inter, "w1", "w3", "w2", m->resident->table[l]);
    D.moe = std::move(f);
    ++m->info.moe_layers;
    m->layers.push_back(std::move(D));
  }
  finish(*m, ck, opts, E, K);
  return m;
}

}  // namespace deltafin
