// Dense MLP, router and the MoE feed-forward (expert-major over a block).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/layers.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace deltafin {

namespace {

// h may alias g.
void activate(Activation act, float beta, float linear_beta, const float* g, const float* u, float* h, int64_t n) {
  switch (act) {
    case Activation::SiLU:
      for (int64_t i = 0; i < n; ++i) h[i] = silu(g[i]) * u[i];
      break;
    case Activation::SiTU:
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i];
        const float a = beta * std::tanh(gi / beta) * sigmoid(gi);
        const float ui = linear_beta > 0.0f ? linear_beta * std::tanh(u[i] / linear_beta) : u[i];
        h[i] = a * ui;
      }
      break;
  }
}

// Indices of the k largest values (descending; ties to the lower index).
void select_top(const float* v, int64_t n, int64_t k, int32_t* out, std::vector<int32_t>& idx) {
  DF_CHECK(k <= n);
  idx.resize(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  std::copy(idx.begin(), idx.begin() + k, out);
}

}  // namespace

void DenseMlp::run(const float* x, int64_t n, float* y, ThreadPool* pool, std::vector<float>& scratch) const {
  const int64_t I = gate.out();
  scratch.resize(2 * n * I);
  float* g = scratch.data();
  float* u = g + n * I;
  gate.run(x, n, g, pool);
  up.run(x, n, u, pool);
  activate(act, act_beta, act_linear_beta, g, u, g, n * I);
  down.run(g, n, y, pool);
}

void Router::route(const float* x, int64_t n, int32_t* ids, float* weights, ThreadPool* pool,
                   std::vector<float>& scratch) const {
  const int64_t E = n_experts;
  scratch.resize(2 * n * E);
  float* logits = scratch.data();
  float* choice = logits + n * E;
  weight.run(x, n, logits, pool);
  std::vector<int32_t> idx, groups(n_group);
  std::vector<float> gscore(n_group);
  for (int64_t r = 0; r < n; ++r) {
    float* lr = logits + r * E;
    float* cr = choice + r * E;
    int32_t* ir = ids + r * top_k;
    float* wr = weights + r * top_k;
    if (kind == Kind::Softmax) {
      softmax(lr, E);
      select_top(lr, E, top_k, ir, idx);
      for (int64_t k = 0; k < top_k; ++k) wr[k] = lr[ir[k]];
      if (norm_topk) {
        float s = 0;
        for (int64_t k = 0; k < top_k; ++k) s += wr[k];
        for (int64_t k = 0; k < top_k; ++k) wr[k] /= s;
      }
    } else {
      for (int64_t e = 0; e < E; ++e) {
        lr[e] = sigmoid(lr[e]);
        cr[e] = lr[e] + (bias.empty() ? 0.0f : bias[e]);
      }
      if (n_group > 1) {
        const int64_t per = E / n_group;
        for (int64_t g = 0; g < n_group; ++g) {
          int32_t two[2];
          select_top(cr + g * per, per, 2, two, idx);
          gscore[g] = cr[g * per + two[0]] + cr[g * per + two[1]];
        }
        select_top(gscore.data(), n_group, topk_group, groups.data(), idx);
        std::vector<bool> keep(n_group, false);
        for (int64_t i = 0; i < topk_group; ++i) keep[groups[i]] = true;
        for (int64_t e = 0; e < E; ++e)
          if (!keep[e / per]) cr[e] = -INFINITY;
      }
      select_top(cr, E, top_k, ir, idx);
      for (int64_t k = 0; k < top_k; ++k) wr[k] = lr[ir[k]];
      if (norm_topk) {
        float s = 0;
        for (int64_t k = 0; k < top_k; ++k) s += wr[k];
        s += 1e-20f;
        for (int64_t k = 0; k < top_k; ++k) wr[k] /= s;
      }
      for (int64_t k = 0; k < top_k; ++k) wr[k] *= scaling;
    }
  }
}

void MoeFfn::run(const float* x, int64_t n, float* y, ExpertSource& experts, ThreadPool* pool) {
  const int64_t K = router.top_k, H = router.weight.in(), I = expert_inter;
  const int64_t He = latent_down ? latent_down->out() : H;
  ids_.resize(n * K);
  w_.resize(n * K);
  router.route(x, n, ids_.data(), w_.data(), pool, scratch_);
  // Union of experts (ascending) and, per expert, the (row, slot) pairs using
  // it: a counting sort of the n*K slots by expert (users_ from user_start_[e]).
  const int64_t E = router.n_experts;
  user_start_.assign(E + 1, 0);
  for (int64_t i = 0; i < n * K; ++i) ++user_start_[ids_[i] + 1];
  for (int64_t e = 0; e < E; ++e) user_start_[e + 1] += user_start_[e];
  users_.resize(n * K);
  fill_.assign(user_start_.begin(), user_start_.end() - 1);
  for (int64_t i = 0; i < n * K; ++i) users_[fill_[ids_[i]]++] = static_cast<int32_t>(i);
  uni_.clear();
  for (int32_t e = 0; e < E; ++e)
    if (user_start_[e + 1] > user_start_[e]) uni_.push_back(e);
  const std::vector<int32_t>& uni = uni_;
  outs_.resize(n * K * He);
  experts.begin_layer(layer, uni);
  // While the routed experts' reads are in flight: the latent projection
  // (Kimi K3) and the shared expert, whose output is still added last.
  // Experts read xe [n, He] and their weighted sum goes to ye [n, He]: x and
  // y themselves, or the latent.
  const float* xe = x;
  float* ye = y;
  if (latent_down) {
    lat_in_.resize(n * He);
    lat_out_.resize(n * He);
    latent_down->run(x, n, lat_in_.data(), pool);
    xe = lat_in_.data();
    ye = lat_out_.data();
  }
  if (shared) {
    shared_.resize(n * H);
    shared->run(x, n, shared_.data(), pool, scratch_);
  }
  for (size_t c = 0; c < uni.size(); ++c) {
    ExpertWeights ew;
    const int32_t e = experts.next(&ew);
    if (e < 0 || e >= E || user_start_[e + 1] == user_start_[e])
      fail("expert source returned expert {} that layer {} did not ask for", e, layer);
    const int32_t* us = users_.data() + user_start_[e];
    const int64_t m = user_start_[e + 1] - user_start_[e];
    xs_.resize(m * He);
    for (int64_t i = 0; i < m; ++i) std::copy_n(xe + (us[i] / K) * He, He, xs_.data() + i * He);
    g_.resize(m * I);
    u_.resize(m * I);
    kernels::matmul(ew.gate, xs_.data(), m, He, g_.data(), I, pool);
    kernels::matmul(ew.up, xs_.data(), m, He, u_.data(), I, pool);
    activate(act, act_beta, act_linear_beta, g_.data(), u_.data(), g_.data(), m * I);
    d_.resize(m * He);
    kernels::matmul(ew.down, g_.data(), m, I, d_.data(), He, pool);
    for (int64_t i = 0; i < m; ++i) std::copy_n(d_.data() + i * He, He, outs_.data() + us[i] * He);
    experts.release(e);
  }
  // Router order: y = sum_k w_k out_k, then + shared.
  for (int64_t r = 0; r < n; ++r) {
    float* yr = ye + r * He;
    std::fill(yr, yr + He, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float wk = w_[r * K + k];
      const float* o = outs_.data() + (r * K + k) * He;
      kernels::axpy(wk, o, yr, He);
    }
  }
  if (latent_down) {
    if (latent_norm) latent_norm->run(ye, n, ye);
    latent_up->run(ye, n, y, pool);
  }
  if (shared)
    for (int64_t i = 0; i < n * H; ++i) y[i] += shared_[i];
}

void ResidentExperts::begin_layer(int layer, std::span<const int32_t> experts) {
  layer_ = layer;
  pending_.assign(experts.begin(), experts.end());
  pos_ = 0;
}

int32_t ResidentExperts::next(ExpertWeights* out) {
  DF_CHECK(pos_ < pending_.size());
  int32_t e = pending_[pos_++];
  *out = table.at(layer_).at(e);
  return e;
}

}  // namespace deltafin
