#include "model/ops.h"

#include <algorithm>
#include <cmath>

#include "util/thread_pool.h"

namespace deltafin {

void rmsnorm(const float* x, const float* w, float eps, int64_t dim, float* y) {
  float ss = kernels::dot(x, x, dim);
  float r = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) {
    float v = x[i] * r;
    y[i] = w ? w[i] * v : v;
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sigmoid(x); }

void softmax(float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= s;
}

void l2norm(float* x, int64_t n, float eps) {
  float d = std::sqrt(kernels::dot(x, x, n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] /= d;
}

void attn_res(const float* const* v, int64_t m, const float* w, float eps, int64_t dim, float* out,
              float* scratch) {
  float* k = scratch;
  float* s = scratch + dim;
  for (int64_t i = 0; i < m; ++i) {
    rmsnorm(v[i], nullptr, eps, dim, k);
    s[i] = kernels::dot(k, w, dim);
  }
  softmax(s, m);
  std::fill(out, out + dim, 0.0f);
  for (int64_t i = 0; i < m; ++i)
    kernels::axpy(s[i], v[i], out, dim);
}

void Linear::run(const float* x, int64_t n, float* y, ThreadPool* pool) const {
  kernels::matmul(w, x, n, w.cols, y, w.rows, pool);
  if (!bias.empty())
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < w.rows; ++o) y[r * w.rows + o] += bias[o];
}

void Norm::run(const float* x, int64_t n, float* y) const {
  const int64_t d = static_cast<int64_t>(w.size());
  for (int64_t r = 0; r < n; ++r) rmsnorm(x + r * d, w.data(), eps, d, y + r * d);
}

void Rope::apply(float* x, int64_t pos) const {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t i = 0; i < half; ++i) {
    float ang = static_cast<float>(pos) * inv_freq[i];
    float c = static_cast<float>(std::cos(static_cast<double>(ang))) * attention_factor;
    float s = static_cast<float>(std::sin(static_cast<double>(ang))) * attention_factor;
    int64_t a = interleaved ? 2 * i : i;
    int64_t b = interleaved ? 2 * i + 1 : i + half;
    float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x1 * c + x0 * s;
  }
}

Rope make_rope_default(double base, int64_t dim) {
  Rope r;
  for (int64_t i = 0; i < dim / 2; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    r.inv_freq.push_back(1.0f / std::pow(static_cast<float>(base), e));
  }
  return r;
}

Rope make_rope_yarn(double base, int64_t dim, double factor, double original_max_pos, double beta_fast,
                    double beta_slow, double mscale, double mscale_all_dim, double attention_factor,
                    bool truncate) {
  auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  if (attention_factor <= 0) {
    if (mscale != 0 && mscale_all_dim != 0)
      attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim);
    else
      attention_factor = get_mscale(factor, 1.0);
  }
  auto corr_dim = [&](double rot) {
    return (static_cast<double>(dim) * std::log(original_max_pos / (rot * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = corr_dim(beta_fast), high = corr_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  Rope r;
  r.attention_factor = static_cast<float>(attention_factor);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    float pos_freq = std::pow(static_cast<float>(base), e);
    float extra = 1.0f / pos_freq;
    float inter = 1.0f / (static_cast<float>(factor) * pos_freq);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    float extra_factor = 1.0f - ramp;
    r.inv_freq.push_back(inter * (1.0f - extra_factor) + extra * extra_factor);
  }
  return r;
}

}  // namespace deltafin
