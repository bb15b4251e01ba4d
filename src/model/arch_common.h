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
