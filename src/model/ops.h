// Small fp32 operations of the forward pass, each with one fixed evaluation
// order (contract 2): nothing here depends on the batch size or threads.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace deltafin {

class ThreadPool;

// y = w * (x * r), r = 1 / sqrt(mean(x^2) + eps), over `dim` elements.
// w may be nullptr (no weight). x and y may alias.
void rmsnorm(const float* x, const float* w, float eps, int64_t dim, float* y);

float silu(float x);     // x * sigmoid(x)
float sigmoid(float x);  // 1 / (1 + exp(-x))

// In-place softmax over n values: max, exp(x - max), sum in index order.
void softmax(float* x, int64_t n);

// x / sqrt(sum x^2 + eps), in place, over n values.
void l2norm(float* x, int64_t n, float eps);

// Attention residual of one row (Kimi K3 AttnRes): over the m streams
// v[0..m) of `dim` floats, k_i = v_i / sqrt(mean(v_i^2) + eps) (no weight),
// s_i = k_i . w, out = sum_i softmax(s)_i v_i (sums in index order).
// REQUIRES: out aliases no v_i; scratch holds dim + m floats.
void attn_res(const float* const* v, int64_t m, const float* w, float eps, int64_t dim, float* out,
              float* scratch);

// A linear layer: weight in its published encoding, optional fp32 bias.
struct Linear {
  kernels::WeightView w;
  std::vector<float> bias;  // empty or [out]
  int64_t out() const { return w.rows; }
  int64_t in() const { return w.cols; }
  // y[r, :] = W x[r, :] (+ bias) for r < n; x [n, in], y [n, out], contiguous.
  void run(const float* x, int64_t n, float* y, ThreadPool* pool) const;
};

// RMSNorm with a weight vector.
struct Norm {
  std::vector<float> w;
  float eps = 1e-6f;
  // Normalises each of n rows of w.size() elements.
  void run(const float* x, int64_t n, float* y) const;
};

// Rotary position embedding tables, as transformers computes them: inverse
// frequencies in fp32 (default or YaRN), angle = fp32(pos * inv_freq),
// cos/sin of it times the attention factor.
struct Rope {
  std::vector<float> inv_freq;  // [dim/2]
  float attention_factor = 1.0f;
  bool interleaved = false;     // pairs (2i, 2i+1) instead of (i, i + dim/2)
  int64_t dim() const { return static_cast<int64_t>(inv_freq.size()) * 2; }
  // Rotates x[0..dim) in place for position pos.
  void apply(float* x, int64_t pos) const;
};

// default rope: inv_freq[i] = 1 / base^(2i/dim).
Rope make_rope_default(double base, int64_t dim);
// YaRN as transformers' _compute_yarn_parameters (truncate defaults true).
Rope make_rope_yarn(double base, int64_t dim, double factor, double original_max_pos,
                    double beta_fast, double beta_slow, double mscale, double mscale_all_dim,
                    double attention_factor, bool truncate);

}  // namespace deltafin
