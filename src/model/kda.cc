// Kimi Delta Attention, recurrent form (the same bits in prefill, decode and
// verification). Per head h with state S [dk, dk] (key channel d, value j):
//   S[d,:] *= exp(g[h,d]);  u = S^T k;  S += k (beta (v - u))^T;  o = S^T q
// with q = l2norm(q)/sqrt(dk), k = l2norm(k), each sum over d in index order.
#include <algorithm>
#include <cmath>

#include "model/layers.h"
#include "util/thread_pool.h"

namespace deltafin {

namespace {

struct KdaState : LayerState {
  std::vector<float> conv;  // [3*D, conv_k-1]: last inputs per channel, oldest first
  std::vector<float> S;     // [H, dk, dk]
  std::unique_ptr<LayerState> snapshot() const override { return std::make_unique<KdaState>(*this); }
  void restore(const LayerState& saved) override { *this = static_cast<const KdaState&>(saved); }
};

float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

}  // namespace

uint64_t KdaAttention::state_bytes(int64_t) const {
  const int64_t D = n_heads * head_dim;
  return static_cast<uint64_t>(3 * D * (conv_k - 1) + n_heads * head_dim * head_dim) * sizeof(float);
}

std::unique_ptr<LayerState> KdaAttention::new_state(int64_t) const {
  auto s = std::make_unique<KdaState>();
  const int64_t D = n_heads * head_dim;
  s->conv.assign(3 * D * (conv_k - 1), 0.0f);
  s->S.assign(n_heads * head_dim * head_dim, 0.0f);
  return s;
}

void KdaAttention::forward(LayerState& st, const float* x, int64_t n, int64_t /*pos0*/, float* out,
                           ThreadPool* pool) {
  auto& s = static_cast<KdaState&>(st);
  const int64_t D = n_heads * head_dim, dk = head_dim, K1 = conv_k - 1;
  qkv_.resize(3 * n * D);
  q.run(x, n, qkv_.data(), pool);
  k.run(x, n, qkv_.data() + n * D, pool);
  v.run(x, n, qkv_.data() + 2 * n * D, pool);
  // Short causal convolutions + SiLU, token by token (state = last K1 inputs).
  const std::vector<float>* convw[3] = {&q_conv, &k_conv, &v_conv};
  for (int part = 0; part < 3; ++part) {
    const float* w = convw[part]->data();
    for (int64_t ch = 0; ch < D; ++ch) {
      float* hist = s.conv.data() + (part * D + ch) * K1;
      const float* wc = w + ch * conv_k;
      for (int64_t r = 0; r < n; ++r) {
        float* xv = qkv_.data() + part * n * D + r * D + ch;
        const float cur = *xv;
        float acc = 0.0f;
        for (int64_t j = 0; j < K1; ++j) acc = std::fma(wc[j], hist[j], acc);
        acc = std::fma(wc[K1], cur, acc);
        for (int64_t j = 0; j + 1 < K1; ++j) hist[j] = hist[j + 1];
        if (K1 > 0) hist[K1 - 1] = cur;
        *xv = silu(acc);
      }
    }
  }
  // Forget gate (log decay) [n, D], beta [n, H], output gate [n, D].
  tmp_.resize(n * f_a.out());
  fg_.resize(n * D);
  f_a.run(x, n, tmp_.data(), pool);
  f_b.run(tmp_.data(), n, fg_.data(), pool);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < n_heads; ++h) {
      const float a = std::exp(a_log[h]);
      for (int64_t d = 0; d < dk; ++d) {
        float& g = fg_[r * D + h * dk + d];
        const float z = g + dt_bias[h * dk + d];
        g = gate_lower_bound ? *gate_lower_bound * sigmoid(a * z) : -a * softplus(z);
      }
    }
  beta_.resize(n * n_heads);
  b.run(x, n, beta_.data(), pool);
  for (auto& bv : beta_) bv = sigmoid(bv);
  og_.resize(n * D);
  if (g_full) {
    g_full->run(x, n, og_.data(), pool);
  } else {
    tmp_.resize(n * g_a->out());
    g_a->run(x, n, tmp_.data(), pool);
    g_b->run(tmp_.data(), n, og_.data(), pool);
  }
  core_.resize(n * D);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  auto head_body = [&](int64_t hb, int64_t he) {
    std::vector<float> qh(dk), kh(dk), u(dk);
    for (int64_t h = hb; h < he; ++h) {
      float* S = s.S.data() + h * dk * dk;
      for (int64_t r = 0; r < n; ++r) {
        const float* qs = qkv_.data() + r * D + h * dk;
        const float* ks = qkv_.data() + n * D + r * D + h * dk;
        const float* vs = qkv_.data() + 2 * n * D + r * D + h * dk;
        std::copy(qs, qs + dk, qh.begin());
        std::copy(ks, ks + dk, kh.begin());
        l2norm(qh.data(), dk, 1e-6f);
        l2norm(kh.data(), dk, 1e-6f);
        for (auto& e : qh) e *= qscale;
        const float* g = fg_.data() + r * D + h * dk;
        for (int64_t d = 0; d < dk; ++d) {
          const float decay = std::exp(g[d]);
          float* row = S + d * dk;
          for (int64_t j = 0; j < dk; ++j) row[j] *= decay;
        }
        std::fill(u.begin(), u.end(), 0.0f);
        for (int64_t d = 0; d < dk; ++d) {
          const float* row = S + d * dk;
          kernels::axpy(kh[d], row, u.data(), dk);  // u[j] = fma(row[j], kh[d], u[j]): the product commutes exactly
        }
        const float bt = beta_[r * n_heads + h];
        for (int64_t j = 0; j < dk; ++j) u[j] = (vs[j] - u[j]) * bt;  // delta
        for (int64_t d = 0; d < dk; ++d) {
          float* row = S + d * dk;
          kernels::axpy(kh[d], u.data(), row, dk);
        }
        float* o = core_.data() + r * D + h * dk;
        std::fill(o, o + dk, 0.0f);
        for (int64_t d = 0; d < dk; ++d) {
          const float* row = S + d * dk;
          kernels::axpy(qh[d], row, o, dk);
        }
        rmsnorm(o, o_norm.w.data(), o_norm.eps, dk, o);
        const float* og = og_.data() + r * D + h * dk;
        for (int64_t j = 0; j < dk; ++j) o[j] *= sigmoid(og[j]);
      }
    }
  };
  if (pool) pool->parallel_for(n_heads, 1, head_body);
  else head_body(0, n_heads);
  o.run(core_.data(), n, out, pool);
}

}  // namespace deltafin
