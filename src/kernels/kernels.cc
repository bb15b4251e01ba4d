// The encoding table, exact row decodes, ISA dispatch and the threaded matmul.
#include "kernels/kernels.h"

#include <cmath>
#include <algorithm>
#include <atomic>

#include "kernels/kernels_internal.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace deltafin::kernels {
namespace {

using detail::bf16_to_float;
using detail::e2m1_to_float;
using detail::e4m3_to_float;
using detail::e8m0_to_float;

const uint8_t* row_ptr(const WeightView& w, int64_t r) {
  return w.data + r * traits(w.enc).row_bytes(w.cols);
}

void decode_f32(const WeightView& w, int64_t r, float* out) {
  std::memcpy(out, row_ptr(w, r), static_cast<size_t>(w.cols) * 4);
}

void decode_bf16(const WeightView& w, int64_t r, float* out) {
  const uint8_t* p = row_ptr(w, r);
  for (int64_t c = 0; c < w.cols; ++c) {
    uint16_t h;
    std::memcpy(&h, p + 2 * c, 2);
    out[c] = bf16_to_float(h);
  }
}

void decode_fp8(const WeightView& w, int64_t r, float* out) {
  const uint8_t* p = row_ptr(w, r);
  const uint8_t* srow = w.scales + ((w.scale_row0 + r) / 128) * w.scale_stride * 4;
  for (int64_t c = 0; c < w.cols; ++c) {
    float s;
    std::memcpy(&s, srow + (c / 128) * 4, 4);
    out[c] = e4m3_to_float(p[c]) * s;
  }
}

// INT4 and MXFP4 share the nibble layout: element 2b in the low nibble of
// byte b, 2b+1 in the high one (for INT4 this is element j of a little-endian
// int32 at bits 4j..4j+3).
void decode_int4(const WeightView& w, int64_t r, float* out) {
  const uint8_t* p = row_ptr(w, r);
  const uint8_t* srow = w.scales + r * (w.cols / 32) * 2;
  for (int64_t c = 0; c < w.cols; ++c) {
    uint16_t h;
    std::memcpy(&h, srow + (c / 32) * 2, 2);
    const int nib = (p[c / 2] >> (4 * (c & 1))) & 15;
    out[c] = static_cast<float>(nib - 8) * bf16_to_float(h);
  }
}

void decode_mxfp4(const WeightView& w, int64_t r, float* out) {
  const uint8_t* p = row_ptr(w, r);
  const uint8_t* srow = w.scales + r * (w.cols / 32);
  for (int64_t c = 0; c < w.cols; ++c) {
    const uint8_t nib = (p[c / 2] >> (4 * (c & 1))) & 15;
    out[c] = e2m1_to_float(nib) * e8m0_to_float(srow[c / 32]);
  }
}

const EncodingTraits kTraits[kNumEncodings] = {
    {"f32", 1, [](int64_t cols) { return cols * 4; }, decode_f32},
    {"bf16", 1, [](int64_t cols) { return cols * 2; }, decode_bf16},
    {"fp8-e4m3-b128", 1, [](int64_t cols) { return cols; }, decode_fp8},
    {"int4-g32", 32, [](int64_t cols) { return cols / 2; }, decode_int4},
    {"mxfp4-g32", 32, [](int64_t cols) { return cols / 2; }, decode_mxfp4},
};

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
  }
  return false;
}

// ISAs with a compiled implementation.
bool compiled(Isa) { return true; }

Isa best_isa() {
  for (Isa i : {Isa::Avx512, Isa::Avx2})
    if (compiled(i) && cpu_has(i)) return i;
  return Isa::Scalar;
}

// The process-wide choice: cpuid at first use, or what force_isa() set.
std::atomic<int>& isa_choice() {
  static std::atomic<int> choice{static_cast<int>(best_isa())};
  return choice;
}

}  // namespace

WeightView WeightView::row_slice(int64_t r0, int64_t n) const {
  DF_CHECK(r0 >= 0 && n >= 0 && r0 + n <= rows);
  WeightView v = *this;
  v.rows = n;
  v.data = data + r0 * traits(enc).row_bytes(cols);
  switch (enc) {
    case Encoding::FP8_B128:
      v.scale_row0 = scale_row0 + r0;
      break;
    case Encoding::INT4_G32:
      v.scales = scales + r0 * (cols / 32) * 2;
      break;
    case Encoding::MXFP4_G32:
      v.scales = scales + r0 * (cols / 32);
      break;
    default:
      break;
  }
  return v;
}

const EncodingTraits& traits(Encoding e) {
  const int i = static_cast<int>(e);
  DF_CHECK(i >= 0 && i < kNumEncodings);
  return kTraits[i];
}

std::string_view encoding_name(Encoding e) { return traits(e).name; }

bool isa_supported(Isa isa) { return compiled(isa) && cpu_has(isa); }

Isa active_isa() { return static_cast<Isa>(isa_choice().load(std::memory_order_relaxed)); }

void force_isa(Isa isa) {
  if (!isa_supported(isa))
    fail("ISA {} is not supported by this CPU or build; use one of the supported ISAs",
         isa_name(isa));
  isa_choice().store(static_cast<int>(isa), std::memory_order_relaxed);
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

void matmul_rows(Isa isa, const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                 int64_t n_rows, int64_t x_stride, float* y, int64_t y_stride) {
  DF_CHECK(0 <= o_begin && o_begin <= o_end && o_end <= w.rows);
  DF_CHECK(w.cols % traits(w.enc).group == 0);
  if (o_begin == o_end || n_rows <= 0) return;
  switch (isa) {
    case Isa::Avx512:
      DF_CHECK(compiled(Isa::Avx512));
      return detail::matmul_rows_avx512(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Isa::Avx2:
      DF_CHECK(compiled(Isa::Avx2));
      return detail::matmul_rows_avx2(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Isa::Scalar:
      break;
  }
  detail::matmul_rows_scalar(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
}

void matmul(const WeightView& w, const float* x, int64_t n_rows, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool* pool) {
  DF_CHECK(x_stride >= w.cols && (n_rows <= 1 || y_stride >= w.rows));
  const Isa isa = active_isa();
  // Chunks of whole row blocks, ~256 KiB of weight bytes each, and at least
  // four chunks per thread so that two threads stay balanced. Each output
  // element is one dot product whatever the chunking, so the chunk size only
  // affects speed, never results.
  const int64_t rb = detail::kRowBlock;
  const int64_t row_bytes = std::max<int64_t>(traits(w.enc).row_bytes(w.cols), 1);
  int64_t grain = std::max<int64_t>(rb, (256 << 10) / row_bytes / rb * rb);
  if (pool && pool->threads() > 1) {
    const int64_t per = (w.rows + 4 * pool->threads() - 1) / (4 * pool->threads());
    grain = std::min(grain, std::max<int64_t>(rb, (per + rb - 1) / rb * rb));
  }
  auto run = [&](int64_t b, int64_t e) {
    matmul_rows(isa, w, b, e, x, n_rows, x_stride, y, y_stride);
  };
  if (!pool || pool->threads() == 1 || w.rows <= grain)
    run(0, w.rows);
  else
    pool->parallel_for(w.rows, grain, run);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  switch (active_isa()) {
    case Isa::Avx512:
      return detail::axpy_avx512(a, x, y, n);
    case Isa::Avx2:
      return detail::axpy_avx2(a, x, y, n);
    case Isa::Scalar:
      break;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

float dot(const float* a, const float* b, int64_t n) {
  switch (active_isa()) {
    case Isa::Avx512:
      return detail::dot_avx512(a, b, n);
    case Isa::Avx2:
      return detail::dot_avx2(a, b, n);
    case Isa::Scalar:
      break;
  }
  return detail::dot_canonical(a, b, n);
}

}  // namespace deltafin::kernels
