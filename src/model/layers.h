// The building blocks every architecture is assembled from: attention
// variants (GQA, MLA, KDA), the dense MLP and the MoE feed-forward.
// Each block works on a block of n rows of one sequence at positions
// pos0 .. pos0+n-1; every output element is computed the same way whatever
// n is (contract 2): a prefill is many decode-shaped computations.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/model.h"
#include "model/ops.h"

namespace deltafin {

// Per-sequence, per-layer state (KV cache, recurrent state).
struct LayerState {
  virtual ~LayerState() = default;
  // Rollback (draft verification): snapshot() keeps what restore() needs to
  // bring this state back to the moment it was taken, provided the sequence
  // has only been appended to since: a cache keeps its length (restore
  // truncates), a recurrent state keeps a copy.
  virtual std::unique_ptr<LayerState> snapshot() const = 0;
  virtual void restore(const LayerState& saved) = 0;
};

class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  // reserve_tokens: positions whose cache is allocated up front (the
  // context limit), so that a growing sequence never reallocates.
  virtual std::unique_ptr<LayerState> new_state(int64_t reserve_tokens = 0) const = 0;
  // Bytes of one sequence's state after `tokens` positions (KV cache, or a
  // recurrent state whatever the length): what the RAM budget charges.
  virtual uint64_t state_bytes(int64_t tokens) const = 0;
  // x: normalised rows [n, hidden]; out: [n, hidden]. Appends to `st`.
  virtual void forward(LayerState& st, const float* x, int64_t n, int64_t pos0, float* out,
                       ThreadPool* pool) = 0;
};

// Grouped-query attention with optional per-head q/k RMSNorm (Qwen3) and rotary embedding.
class GqaAttention : public AttentionLayer {
 public:
  Linear q, k, v, o;
  std::optional<Norm> q_norm, k_norm;  // over head_dim
  Rope rope;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;

  std::unique_ptr<LayerState> new_state(int64_t reserve_tokens = 0) const override;
  uint64_t state_bytes(int64_t tokens) const override;
  void forward(LayerState& st, const float* x, int64_t n, int64_t pos0, float* out, ThreadPool* pool) override;

 private:
  std::vector<float> qb_, ob_;
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi). The cache holds, per
// position, the normalised latent c_kv [kv_lora] and the shared rotary key
// k_r [rope_dim]; kv_b_proj is absorbed into the query (W_uk) and the output
// (W_uv), so prefill and decode take the same path.
class MlaAttention : public AttentionLayer {
 public:
  std::optional<Linear> q_proj;          // without q_lora
  std::optional<Linear> q_a, q_b;        // with q_lora
  std::optional<Norm> q_a_norm;
  Linear kv_a;                           // [kv_lora + rope_dim, hidden]
  Norm kv_a_norm;                        // [kv_lora]
  kernels::WeightView kv_b;              // [H * (nope + v), kv_lora]
  Linear o;
  std::optional<Linear> out_gate;        // Kimi K3: out *= sigmoid(g_proj x)
  std::optional<Rope> rope;              // none: no positional encoding (Kimi)
  int64_t n_heads = 0, nope = 0, rope_dim = 0, v_dim = 0, kv_lora = 0;
  float scale = 1.0f;

  std::unique_ptr<LayerState> new_state(int64_t reserve_tokens = 0) const override;
  uint64_t state_bytes(int64_t tokens) const override;
  void forward(LayerState& st, const float* x, int64_t n, int64_t pos0, float* out, ThreadPool* pool) override;

 private:
  std::vector<float> qb_, tmp_, ckv_, ob_, gate_;
};

// Kimi Delta Attention (linear attention, recurrent form in every path).
class KdaAttention : public AttentionLayer {
 public:
  Linear q, k, v;                     // [H*dk, hidden]
  std::vector<float> q_conv, k_conv, v_conv;  // [H*dk, conv_k], index conv_k-1 = current token
  int64_t conv_k = 4;
  Linear f_a, f_b;                    // forget gate: hidden -> dk -> H*dk
  std::vector<float> a_log;           // [H]
  std::vector<float> dt_bias;         // [H*dk]
  std::optional<float> gate_lower_bound;  // K3: g = lb * sigmoid(exp(A) (g + dt)); else -exp(A) softplus(g + dt)
  Linear b;                           // beta: [H, hidden]
  std::optional<Linear> g_a, g_b;     // low-rank output gate (Kimi Linear)
  std::optional<Linear> g_full;       // full-rank output gate (Kimi K3)
  Norm o_norm;                        // [dk]
  Linear o;
  int64_t n_heads = 0, head_dim = 0;

  std::unique_ptr<LayerState> new_state(int64_t reserve_tokens = 0) const override;
  uint64_t state_bytes(int64_t tokens) const override;
  void forward(LayerState& st, const float* x, int64_t n, int64_t pos0, float* out, ThreadPool* pool) override;

 private:
  std::vector<float> qkv_, fg_, tmp_, beta_, og_, core_;
};

// GLU activations h = act(g, u):
//   SiLU: silu(g) * u
//   SiTU (Kimi K3): beta tanh(g/beta) sigmoid(g) * lb tanh(u/lb), with
//         beta = act_beta, lb = act_linear_beta (0: u is not transformed).
enum class Activation { SiLU, SiTU };

// down(act(gate x, up x))
struct DenseMlp {
  Linear gate, up, down;
  Activation act = Activation::SiLU;
  float act_beta = 1.0f, act_linear_beta = 0.0f;  // SiTU only
  void run(const float* x, int64_t n, float* y, ThreadPool* pool, std::vector<float>& scratch) const;
};

// Router: picks top-k experts per row and their weights, in router order
// (descending choice score, ties to the lower expert id).
struct Router {
  enum class Kind { Softmax, SigmoidNoAux } kind = Kind::Softmax;
  Linear weight;              // [experts, hidden], computed in fp32
  std::vector<float> bias;    // e_score_correction_bias (SigmoidNoAux)
  int64_t n_experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk = true;
  float scaling = 1.0f;
  // ids/weights: [n, top_k].
  void route(const float* x, int64_t n, int32_t* ids, float* weights, ThreadPool* pool,
             std::vector<float>& scratch) const;
};

struct MoeFfn {
  int layer = 0;              // index given to the ExpertSource
  Router router;
  int64_t expert_inter = 0;
  std::optional<DenseMlp> shared;
  Activation act = Activation::SiLU;
  float act_beta = 1.0f, act_linear_beta = 0.0f;  // SiTU only
  // Latent MoE (Kimi K3): routed experts work on z = latent_down x [latent]
  // and their sum goes through latent_norm (when present) and latent_up.
  std::optional<Linear> latent_down, latent_up;
  std::optional<Norm> latent_norm;
  // y = sum_k w_k expert_k(x) (router order) + shared(x); with a latent:
  // y = latent_up(latent_norm(sum_k w_k expert_k(latent_down x))) + shared(x).
  void run(const float* x, int64_t n, float* y, ExpertSource& experts, ThreadPool* pool);

 private:
  std::vector<float> scratch_, xs_, h_, g_, u_, d_, outs_, shared_, lat_in_, lat_out_;
  std::vector<int32_t> ids_, users_, uni_;
  std::vector<int64_t> user_start_, fill_;
  std::vector<float> w_;
};

// Experts held in memory (views into the checkpoint's mapping): [layer][expert].
class ResidentExperts : public ExpertSource {
 public:
  std::vector<std::vector<ExpertWeights>> table;
  void begin_layer(int layer, std::span<const int32_t> experts) override;
  int32_t next(ExpertWeights* out) override;
  void release(int32_t) override {}

 private:
  int layer_ = 0;
  std::vector<int32_t> pending_;
  size_t pos_ = 0;
};

}  // namespace deltafin
