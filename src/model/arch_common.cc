#include "model/arch_common.h"

#include <cmath>

namespace deltafin::arch {

Rope rope_from_config(const ModelConfig& cfg, int64_t dim, double* softmax_mscale) {
  const nlohmann::json* rp = cfg.object("rope_parameters");
  if (!rp) rp = cfg.object("rope_scaling");
  auto num = [&](const char* k, double d) {
    if (rp && rp->contains(k) && (*rp)[k].is_number()) return (*rp)[k].get<double>();
    return d;
  };
  double base = num("rope_theta", cfg.f64({"rope_theta"}, 10000.0));
  std::string type = "default";
  if (rp) {
    if (rp->contains("rope_type") && (*rp)["rope_type"].is_string()) type = (*rp)["rope_type"];
    else if (rp->contains("type") && (*rp)["type"].is_string()) type = (*rp)["type"];
  }
  if (softmax_mscale) *softmax_mscale = 1.0;
  if (type == "default") return make_rope_default(base, dim);
  if (type == "yarn") {
    double orig = num("original_max_position_embeddings", cfg.f64({"original_max_position_embeddings"}, 0));
    if (orig <= 0) fail("{}: yarn rope needs original_max_position_embeddings", cfg.label());
    double factor = num("factor", 0);
    if (factor <= 0) factor = cfg.f64({"max_position_embeddings"}) / orig;
    double mscale = num("mscale", 0), mscale_all = num("mscale_all_dim", 0);
    bool truncate = !(rp->contains("truncate") && (*rp)["truncate"].is_boolean() && !(*rp)["truncate"].get<bool>());
    double bf = num("beta_fast", 0), bs = num("beta_slow", 0);
    if (bf == 0) bf = 32;
    if (bs == 0) bs = 1;
    if (softmax_mscale && mscale_all != 0 && factor > 1) {
      double m = 0.1 * mscale_all * std::log(factor) + 1.0;
      *softmax_mscale = m * m;
    }
    return make_rope_yarn(base, dim, factor, orig, bf, bs, mscale, mscale_all, num("attention_factor", 0), truncate);
  }
  fail("{}: rope type '{}' is not supported (default and yarn are)", cfg.label(), type);
}

void load_embeddings_and_head(const Checkpoint& ck, DecoderModel& m, const std::string& prefix, double eps) {
  const int64_t V = m.info.vocab, H = m.info.hidden;
  m.embed = ck.linear(prefix + "model.embed_tokens", V, H);
  m.final_norm = norm(ck, prefix + "model.norm.weight", H, eps);
  if (ck.has_linear(prefix + "lm_head")) {
    m.lm_head = linear(ck, prefix + "lm_head", V, H);
  } else if (ck.config().boolean({"tie_word_embeddings"}, false)) {
    m.lm_head.w = m.embed;
  } else {
    fail("{}: tensor {}lm_head.weight is missing and tie_word_embeddings is false", ck.dir().string(), prefix);
  }
}

void check_range(const ModelConfig& cfg, const char* key, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) fail("{}: \"{}\" = {} is out of range [{}, {}]", cfg.label(), key, value, lo, hi);
}

}  // namespace deltafin::arch

namespace deltafin::arch {

std::unique_ptr<GqaAttention> gqa_attention(const Checkpoint& ck, const std::string& p, bool qk_norm) {
  const ModelConfig& c = ck.config();
  const int64_t H = c.i64({"hidden_size"}), nh = c.i64({"num_attention_heads"});
  const int64_t nkv = c.i64({"num_key_value_heads"}, nh);
  const int64_t hd = c.i64({"head_dim"}, H / nh);
  if (nkv <= 0 || nh % nkv != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", c.label(), nh, nkv);
  const double eps = c.f64({"rms_norm_eps"}, 1e-6);
  auto a = std::make_unique<GqaAttention>();
  a->n_heads = nh;
  a->n_kv_heads = nkv;
  a->head_dim = hd;
  a->q = linear(ck, p + "q_proj", nh * hd, H);
  a->k = linear(ck, p + "k_proj", nkv * hd, H);
  a->v = linear(ck, p + "v_proj", nkv * hd, H);
  a->o = linear(ck, p + "o_proj", H, nh * hd);
  if (qk_norm) {
    a->q_norm = norm(ck, p + "q_norm.weight", hd, eps);
    a->k_norm = norm(ck, p + "k_norm.weight", hd, eps);
  }
  a->rope = rope_from_config(c, hd, nullptr);
  a->scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  return a;
}

}  // namespace deltafin::arch

namespace deltafin::arch {

std::unique_ptr<MlaAttention> mla_attention(const Checkpoint& ck, const std::string& a, const MlaDims& d,
                                            int64_t H, double softmax_mscale) {
  auto at = std::make_unique<MlaAttention>();
  at->n_heads = d.heads;
  at->nope = d.nope;
  at->rope_dim = d.rope_dim;
  at->v_dim = d.v_dim;
  at->kv_lora = d.kv_lora;
  const int64_t qd = d.heads * (d.nope + d.rope_dim);
  if (d.q_lora > 0) {
    at->q_a = linear(ck, a + "q_a_proj", d.q_lora, H);
    at->q_a_norm = norm(ck, a + "q_a_layernorm.weight", d.q_lora, 1e-6);
    at->q_b = linear(ck, a + "q_b_proj", qd, d.q_lora);
  } else {
    at->q_proj = linear(ck, a + "q_proj", qd, H);
  }
  at->kv_a = linear(ck, a + "kv_a_proj_with_mqa", d.kv_lora + d.rope_dim, H);
  at->kv_a_norm = norm(ck, a + "kv_a_layernorm.weight", d.kv_lora, 1e-6);
  at->kv_b = ck.linear(a + "kv_b_proj", d.heads * (d.nope + d.v_dim), d.kv_lora);
  at->o = linear(ck, a + "o_proj", H, d.heads * d.v_dim);
  at->scale = static_cast<float>(std::pow(static_cast<double>(d.nope + d.rope_dim), -0.5) * softmax_mscale);
  return at;
}

std::unique_ptr<KdaAttention> kda_attention(const Checkpoint& ck, const std::string& a, const KdaDims& d,
                                            int64_t H, double eps) {
  const int64_t Dm = d.heads * d.head_dim;
  auto kd = std::make_unique<KdaAttention>();
  kd->n_heads = d.heads;
  kd->head_dim = d.head_dim;
  kd->conv_k = d.conv_k;
  kd->q = linear(ck, a + "q_proj", Dm, H);
  kd->k = linear(ck, a + "k_proj", Dm, H);
  kd->v = linear(ck, a + "v_proj", Dm, H);
  kd->q_conv = ck.floats(a + "q_conv1d.weight", Dm * d.conv_k);
  kd->k_conv = ck.floats(a + "k_conv1d.weight", Dm * d.conv_k);
  kd->v_conv = ck.floats(a + "v_conv1d.weight", Dm * d.conv_k);
  kd->f_a = linear(ck, a + "f_a_proj", d.head_dim, H);
  kd->f_b = linear(ck, a + "f_b_proj", Dm, d.head_dim);
  // Kimi Linear publishes A_log as [1, 1, heads, 1]; Kimi K3 as [head_dim]
  // (128 values for 96 heads). The kernels read one value per head, A_log[h].
  const int64_t n_alog = ck.require(a + "A_log").numel();
  if (n_alog < d.heads)
    fail("{}: tensor {}A_log has {} values, fewer than the {} KDA heads", ck.dir().string(), a, n_alog, d.heads);
  kd->a_log = ck.floats(a + "A_log", n_alog);
  kd->a_log.resize(d.heads);
  kd->dt_bias = ck.floats(a + "dt_bias", Dm);
  kd->gate_lower_bound = d.gate_lower_bound;
  kd->b = linear(ck, a + "b_proj", d.heads, H);
  if (d.full_rank_gate) {
    kd->g_full = linear(ck, a + "g_proj", Dm, H);
  } else {
    kd->g_a = linear(ck, a + "g_a_proj", d.head_dim, H);
    kd->g_b = linear(ck, a + "g_b_proj", Dm, d.head_dim);
  }
  kd->o_norm = norm(ck, a + "o_norm.weight", d.head_dim, eps);
  kd->o = linear(ck, a + "o_proj", H, Dm);
  return kd;
}

Router router(const Checkpoint& ck, const std::string& gate, const RouterSpec& s, int64_t H) {
  const ModelConfig& c = ck.config();
  Router r;
  r.kind = s.kind;
  r.weight = linear(ck, gate, s.experts, H);
  if (ck.find(gate + ".e_score_correction_bias")) r.bias = ck.floats(gate + ".e_score_correction_bias", s.experts);
  r.n_experts = s.experts;
  r.top_k = s.top_k;
  r.n_group = s.n_group;
  r.topk_group = s.topk_group;
  if (r.n_group < 1 || s.experts % r.n_group != 0)
    fail("{}: {} experts cannot be split into {} groups", c.label(), s.experts, r.n_group);
  // Group scores sum each group's two best experts (as transformers' topk(2)).
  if (r.n_group > 1 && s.experts / r.n_group < 2)
    fail("{}: {} groups of {} experts: group-limited routing needs at least 2 experts per group", c.label(),
         r.n_group, s.experts / r.n_group);
  check_range(c, "topk_group", r.topk_group, 1, r.n_group);
  r.norm_topk = s.norm_topk;
  r.scaling = s.scaling;
  return r;
}

void append_experts(const Checkpoint& ck, const std::string& prefix, int64_t n, int64_t in, int64_t inter,
                    const char* gate, const char* up, const char* down, std::vector<ExpertWeights>& row) {
  for (int64_t e = 0; e < n; ++e) row.push_back(expert(ck, prefix + std::to_string(e), in, inter, gate, up, down));
}

void finish(DecoderModel& m, const Checkpoint& ck, const ModelOptions& opts, int64_t experts, int64_t top_k) {
  m.info.experts_per_layer = experts;
  m.info.experts_per_token = top_k;
  m.count_bytes(ck, ".experts.");
  m.pool = opts.pool;
  m.experts = opts.experts ? opts.experts : m.resident.get();
}

}  // namespace deltafin::arch
