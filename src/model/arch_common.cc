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
