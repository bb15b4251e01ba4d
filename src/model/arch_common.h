// Helpers the architecture files share to fill a DecoderModel from a
// checkpoint: tensors by name, norms, rope from config, MLPs and experts.
#pragma once

#include <string>

#include "format/checkpoint.h"
#include "model/decoder.h"
#include "util/error.h"

namespace deltafin::arch {

inline Linear linear(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t in) {
  Linear l;
  l.w = ck.linear(prefix, out, in);
  if (ck.find(prefix + ".bias")) l.bias = ck.floats(prefix + ".bias", out);
  return l;
}

inline Norm norm(const Checkpoint& ck, const std::string& name, int64_t dim, double eps) {
  Norm n;
  n.w = ck.floats(name, dim);
  n.eps = static_cast<float>(eps);
  return n;
}

inline DenseMlp dense_mlp(const Checkpoint& ck, const std::string& prefix, int64_t hidden, int64_t inter,
                          const char* gate = "gate_proj", const char* up = "up_proj",
                          const char* down = "down_proj") {
  DenseMlp m;
  m.gate = linear(ck, prefix + "." + gate, inter, hidden);
  m.up = linear(ck, prefix + "." + up, inter, hidden);
  m.down = linear(ck, prefix + "." + down, hidden, inter);
  return m;
}

inline ExpertWeights expert(const Checkpoint& ck, const std::string& prefix, int64_t hidden, int64_t inter,
                            const char* gate, const char* up, const char* down) {
  return {ck.linear(prefix + "." + gate, inter, hidden), ck.linear(prefix + "." + up, inter, hidden),
          ck.linear(prefix + "." + down, hidden, inter)};
}

// Rotary embedding of `dim` channels from config.json's rope_parameters /
// rope_scaling / rope_theta. Sets *softmax_mscale to YaRN's mscale_all_dim
// factor (DeepSeek multiplies the softmax scale by its square).
Rope rope_from_config(const ModelConfig& cfg, int64_t dim, double* softmax_mscale);

// Embeddings, final norm and lm_head (tied when the config says so).
void load_embeddings_and_head(const Checkpoint& ck, DecoderModel& m, const std::string& prefix, double eps);

// Requires 0 < value <= limit, else a clear error naming the key.
void check_range(const ModelConfig& cfg, const char* key, int64_t value, int64_t lo, int64_t hi);

}  // namespace deltafin::arch

namespace deltafin::arch {

// Standard GQA attention at `prefix` ("model.layers.L.self_attn."): q/k/v/o
// projections (with biases when present), q_norm/k_norm when `qk_norm`, and
// default rope over head_dim.
std::unique_ptr<GqaAttention> gqa_attention(const Checkpoint& ck, const std::string& prefix, bool qk_norm);

}  // namespace deltafin::arch

namespace deltafin::arch {

// Multi-head latent attention at `a` ("model.layers.L.self_attn."): q_proj or
// q_a/q_a_layernorm/q_b, kv_a_proj_with_mqa + kv_a_layernorm, kv_b_proj,
// o_proj. The latent norms use eps 1e-6, the reference code's default (not
// rms_norm_eps). Softmax scale (nope + rope)^-0.5 x softmax_mscale. No rope
// and no output gate: callers add those their architecture has.
struct MlaDims {
  int64_t heads = 0, q_lora = 0, kv_lora = 0, nope = 0, rope_dim = 0, v_dim = 0;
};
std::unique_ptr<MlaAttention> mla_attention(const Checkpoint& ck, const std::string& a, const MlaDims& d,
                                            int64_t hidden, double softmax_mscale = 1.0);

// Kimi Delta Attention at `a`: q/k/v projections and short convolutions,
// f_a/f_b forget gate with A_log (one value per head: the first `heads`
// values of the published tensor) and dt_bias, b_proj, output gate
// (g_proj when full_rank_gate, else g_a/g_b), o_norm (eps), o_proj.
struct KdaDims {
  int64_t heads = 0, head_dim = 0, conv_k = 4;
  bool full_rank_gate = false;
  std::optional<float> gate_lower_bound;
};
std::unique_ptr<KdaAttention> kda_attention(const Checkpoint& ck, const std::string& a, const KdaDims& d,
                                            int64_t hidden, double eps);

// A router at `gate` ("...mlp.gate"), with gate.e_score_correction_bias when
// present. Checks experts % n_group and topk_group against the config.
struct RouterSpec {
  Router::Kind kind = Router::Kind::Softmax;
  int64_t experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk = true;
  float scaling = 1.0f;
};
Router router(const Checkpoint& ck, const std::string& gate, const RouterSpec& s, int64_t hidden);

// Appends experts 0..n-1 at `prefix` ("...mlp.experts.") to `row`:
// [inter, in] gate/up and [in, inter] down matrices named by the arguments.
void append_experts(const Checkpoint& ck, const std::string& prefix, int64_t n, int64_t in, int64_t inter,
                    const char* gate, const char* up, const char* down, std::vector<ExpertWeights>& row);

// The end of every builder: expert counts, byte counts, threads and the
// source of routed experts (the checkpoint's own unless opts gives one).
void finish(DecoderModel& m, const Checkpoint& ck, const ModelOptions& opts, int64_t experts, int64_t top_k);

}  // namespace deltafin::arch
