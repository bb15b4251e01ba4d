// GQA and MLA attention. Each query walks its keys in position order with
// the canonical dot product; threads split (row, head) pairs, never a sum.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/layers.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace deltafin {

namespace {

struct KvCache : LayerState {
  std::vector<float> k, v;  // [len, width]
  int64_t len = 0;
  std::unique_ptr<LayerState> snapshot() const override {
    auto s = std::make_unique<KvCache>();
    s->len = len;  // the rows before it never change: truncating restores
    return s;
  }
  void restore(const LayerState& saved) override {
    const int64_t to = static_cast<const KvCache&>(saved).len;
    DF_CHECK(to <= len);
    if (len > 0) {
      k.resize(k.size() / len * to);
      v.resize(v.size() / len * to);
    }
    len = to;
  }
};

// Runs fn(r, h) for every row and head, split over threads by (r, h) pairs.
template <typename Fn>
void for_rows_heads(ThreadPool* pool, int64_t n, int64_t heads, Fn fn) {
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i / heads, i % heads);
  };
  if (pool) pool->parallel_for(n * heads, 1, body);
  else body(0, n * heads);
}

}  // namespace

// ---------------- GQA ----------------

std::unique_ptr<LayerState> GqaAttention::new_state(int64_t reserve_tokens) const {
  auto c = std::make_unique<KvCache>();
  c->k.reserve(static_cast<size_t>(reserve_tokens * n_kv_heads * head_dim));
  c->v.reserve(static_cast<size_t>(reserve_tokens * n_kv_heads * head_dim));
  return c;
}

uint64_t GqaAttention::state_bytes(int64_t tokens) const {
  return static_cast<uint64_t>(2 * tokens * n_kv_heads * head_dim) * sizeof(float);
}

void GqaAttention::forward(LayerState& st, const float* x, int64_t n, int64_t pos0, float* out,
                           ThreadPool* pool) {
  auto& c = static_cast<KvCache&>(st);
  const int64_t qw = n_heads * head_dim, kw = n_kv_heads * head_dim;
  qb_.resize(n * qw);
  ob_.resize(n * qw);
  c.k.resize((c.len + n) * kw);
  c.v.resize((c.len + n) * kw);
  q.run(x, n, qb_.data(), pool);
  float* knew = c.k.data() + c.len * kw;
  float* vnew = c.v.data() + c.len * kw;
  k.run(x, n, knew, pool);
  v.run(x, n, vnew, pool);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* qh = qb_.data() + r * qw + h * head_dim;
      if (q_norm) rmsnorm(qh, q_norm->w.data(), q_norm->eps, head_dim, qh);
      rope.apply(qh, pos0 + r);
    }
    for (int64_t h = 0; h < n_kv_heads; ++h) {
      float* kh = knew + r * kw + h * head_dim;
      if (k_norm) rmsnorm(kh, k_norm->w.data(), k_norm->eps, head_dim, kh);
      rope.apply(kh, pos0 + r);
    }
  }
  const int64_t group = n_heads / n_kv_heads;
  for_rows_heads(pool, n, n_heads, [&](int64_t r, int64_t h) {
    const int64_t T = c.len + r + 1;  // keys 0 .. pos
    const int64_t kvh = h / group;
    std::vector<float> p(T);
    const float* qh = qb_.data() + r * qw + h * head_dim;
    for (int64_t t = 0; t < T; ++t) p[t] = kernels::dot(qh, c.k.data() + t * kw + kvh * head_dim, head_dim) * scale;
    softmax(p.data(), T);
    float* oh = ob_.data() + r * qw + h * head_dim;
    std::fill(oh, oh + head_dim, 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      const float* vt = c.v.data() + t * kw + kvh * head_dim;
      kernels::axpy(p[t], vt, oh, head_dim);
    }
  });
  c.len += n;
  o.run(ob_.data(), n, out, pool);
}

// ---------------- MLA ----------------

std::unique_ptr<LayerState> MlaAttention::new_state(int64_t reserve_tokens) const {
  auto c = std::make_unique<KvCache>();
  c->k.reserve(static_cast<size_t>(reserve_tokens * (kv_lora + rope_dim)));
  return c;
}

uint64_t MlaAttention::state_bytes(int64_t tokens) const {
  return static_cast<uint64_t>(tokens * (kv_lora + rope_dim)) * sizeof(float);
}

void MlaAttention::forward(LayerState& st, const float* x, int64_t n, int64_t pos0, float* out,
                           ThreadPool* pool) {
  auto& c = static_cast<KvCache&>(st);
  const int64_t qhd = nope + rope_dim, qw = n_heads * qhd, cw = kv_lora + rope_dim;
  qb_.resize(n * qw);
  if (q_proj) {
    q_proj->run(x, n, qb_.data(), pool);
  } else {
    tmp_.resize(n * q_a->out());
    q_a->run(x, n, tmp_.data(), pool);
    q_a_norm->run(tmp_.data(), n, tmp_.data());
    q_b->run(tmp_.data(), n, qb_.data(), pool);
  }
  // Latent cache rows: [c_kv (normalised) | k_r (rotated)].
  c.k.resize((c.len + n) * cw);
  float* cnew = c.k.data() + c.len * cw;
  kv_a.run(x, n, cnew, pool);
  for (int64_t r = 0; r < n; ++r) {
    float* row = cnew + r * cw;
    rmsnorm(row, kv_a_norm.w.data(), kv_a_norm.eps, kv_lora, row);
    if (rope) {
      rope->apply(row + kv_lora, pos0 + r);
      for (int64_t h = 0; h < n_heads; ++h) rope->apply(qb_.data() + r * qw + h * qhd + nope, pos0 + r);
    }
  }
  ob_.resize(n * n_heads * v_dim);
  const kernels::Isa isa = kernels::active_isa();
  // Threads split heads; each head decodes its W_uk rows once for all rows.
  auto head_body = [&](int64_t hb, int64_t he) {
    std::vector<float> wuk(nope * kv_lora), qa(cw), olat(kv_lora);
    std::vector<float> p;
    for (int64_t h = hb; h < he; ++h) {
      const int64_t row0 = h * (nope + v_dim);
      for (int64_t j = 0; j < nope; ++j)
        kernels::traits(kv_b.enc).decode_row(kv_b, row0 + j, wuk.data() + j * kv_lora);
      kernels::WeightView wuv = kv_b.row_slice(row0 + nope, v_dim);
      for (int64_t r = 0; r < n; ++r) {
        const float* qh = qb_.data() + r * qw + h * qhd;
        // qa[:kv_lora] = W_uk^T q_nope, summed over j in order.
        std::fill(qa.begin(), qa.begin() + kv_lora, 0.0f);
        for (int64_t j = 0; j < nope; ++j) {
          const float qj = qh[j];
          const float* w = wuk.data() + j * kv_lora;
          kernels::axpy(qj, w, qa.data(), kv_lora);
        }
        std::copy(qh + nope, qh + qhd, qa.begin() + kv_lora);
        const int64_t T = c.len + r + 1;
        p.resize(T);
        for (int64_t t = 0; t < T; ++t) p[t] = kernels::dot(qa.data(), c.k.data() + t * cw, cw) * scale;
        softmax(p.data(), T);
        std::fill(olat.begin(), olat.end(), 0.0f);
        for (int64_t t = 0; t < T; ++t) {
          const float* ct = c.k.data() + t * cw;
          kernels::axpy(p[t], ct, olat.data(), kv_lora);
        }
        kernels::matmul_rows(isa, wuv, 0, v_dim, olat.data(), 1, kv_lora, ob_.data() + (r * n_heads + h) * v_dim,
                             v_dim);
      }
    }
  };
  // One contiguous range of heads per thread: the scratch above is made once per thread.
  if (pool) pool->parallel_for(n_heads, (n_heads + pool->threads() - 1) / pool->threads(), head_body);
  else head_body(0, n_heads);
  c.len += n;
  if (out_gate) {
    gate_.resize(n * n_heads * v_dim);
    out_gate->run(x, n, gate_.data(), pool);
    for (int64_t i = 0; i < n * n_heads * v_dim; ++i) ob_[i] *= sigmoid(gate_[i]);
  }
  o.run(ob_.data(), n, out, pool);
}

}  // namespace deltafin
