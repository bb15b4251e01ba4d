// Shared by the kernel translation units (one per ISA): exact scalar decodes,
// the canonical lane-reduction tree, and the per-ISA entry points.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"

namespace deltafin::kernels::detail {

// matmul() hands threads whole multiples of this many output rows (the
// largest tile of output rows of any ISA), so no tile is split.
constexpr int64_t kRowBlock = 8;

inline float bits_to_float(uint32_t b) { return std::bit_cast<float>(b); }

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// e4m3 (bias 7, no infinities; 0x7f and 0xff are NaN, decoded as the quiet
// NaN of their sign: 0x7fc00000 and 0xffc00000).
inline float e4m3_to_float(uint8_t q) {
  if (q == 0x7f) return bits_to_float(0x7fc00000u);
  if (q == 0xff) return bits_to_float(0xffc00000u);
  const int e = (q >> 3) & 15, m = q & 7;
  // Subnormal: m * 2^-9; normal: (8 + m) * 2^(e - 10). Both exact in fp32.
  float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                   : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (q & 0x80) ? -v : v;
}

// E2M1 magnitudes; bit 3 is the sign (nibble 8 is -0.0).
inline float e2m1_to_float(uint8_t nib) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = kMag[nib & 7];
  return (nib & 8) ? -v : v;
}

// E8M0 scale 2^(s - 127) as an fp32: s = 0 is the subnormal 2^-127, s = 255
// (NaN in the OCP MX spec) comes out as 2^128 = +inf.
inline float e8m0_to_float(uint8_t s) {
  return bits_to_float(s == 0 ? 0x00400000u : static_cast<uint32_t>(s) << 23);
}

// The canonical reduction tree of kernels.h over 16 lane accumulators.
inline float reduce16(const float* acc) {
  float s8[8], s4[4], s2[2];
  for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
  return s2[0] + s2[1];
}

// The canonical dot product of a decoded fp32 weight row with x (scalar).
inline float dot_canonical(const float* w, const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(w[i + l], x[i + l], acc[l]);
  for (int l = 0; i + l < n; ++l) acc[l] = std::fma(w[i + l], x[i + l], acc[l]);
  return reduce16(acc);
}

// Per-ISA implementations of matmul_rows (same contract).
void matmul_rows_scalar(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                        int64_t n_rows, int64_t x_stride, float* y, int64_t y_stride);
void matmul_rows_avx2(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                      int64_t n_rows, int64_t x_stride, float* y, int64_t y_stride);
void matmul_rows_avx512(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                        int64_t n_rows, int64_t x_stride, float* y, int64_t y_stride);

float dot_avx2(const float* a, const float* b, int64_t n);
float dot_avx512(const float* a, const float* b, int64_t n);
void axpy_avx2(float a, const float* x, float* y, int64_t n);
void axpy_avx512(float a, const float* x, float* y, int64_t n);

}  // namespace deltafin::kernels::detail
