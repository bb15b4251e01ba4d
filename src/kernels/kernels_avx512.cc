// AVX-512 (F, BW, VL, DQ, VBMI) matmul_rows: weights decoded exactly to fp32
// in registers, one 16-lane zmm accumulator per output element, so the
// result is bit-identical to the scalar reference (kernels.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/kernels_internal.h"
#include "util/aligned.h"

namespace deltafin::kernels::detail {
namespace {

inline __mmask16 tail_mask(int t) { return static_cast<__mmask16>((1u << t) - 1); }

struct V {
  using reg = __m512;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_tail(const float* p, int t) { return _mm512_maskz_loadu_ps(tail_mask(t), p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg fma(reg w, reg x, reg acc) { return _mm512_fmadd_ps(w, x, acc); }
  // Lanes >= t keep acc (they are not part of the reduction).
  static reg fma_tail(reg w, reg x, reg acc, int t) {
    return _mm512_mask3_fmadd_ps(w, x, acc, tail_mask(t));
  }
  // The canonical tree: s8 = acc[l] + acc[l+8], s4, s2, s2[0] + s2[1].
  static float reduce(reg a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
};

struct NoMult {};

struct DecF32 {
  static constexpr int64_t kGroup = 256;
  static constexpr bool kNanCheck = false;
  struct Row {
    const uint8_t* p;
    const float* gs;
  };
  using Mult = NoMult;
  static int64_t stage_size(int64_t) { return 0; }
  static Row row(const WeightView& w, int64_t o, float*) { return {w.data + o * w.cols * 4, nullptr}; }
  static Mult mult(const Row&, int64_t) { return {}; }
  template <bool>
  static __m512 vec(const Row& r, Mult, int64_t c) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(r.p) + c);
  }
  static __m512 vec_tail(const Row& r, Mult, int64_t c, int t) {
    return _mm512_maskz_loadu_ps(tail_mask(t), reinterpret_cast<const float*>(r.p) + c);
  }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
};

struct DecBF16 {
  static constexpr int64_t kGroup = 256;
  static constexpr bool kNanCheck = false;
  using Row = DecF32::Row;
  using Mult = NoMult;
  static int64_t stage_size(int64_t) { return 0; }
  static Row row(const WeightView& w, int64_t o, float*) { return {w.data + o * w.cols * 2, nullptr}; }
  static Mult mult(const Row&, int64_t) { return {}; }
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  template <bool>
  static __m512 vec(const Row& r, Mult, int64_t c) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.p + 2 * c)));
  }
  static __m512 vec_tail(const Row& r, Mult, int64_t c, int t) {
    return widen(_mm256_maskz_loadu_epi16(tail_mask(t), r.p + 2 * c));
  }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
};

// FP8 e4m3: the byte, sign-extended to 32 bits and shifted left by 20, keeps
// the sign in bit 31 and s.eeee.mmm's exponent and mantissa in bits 26..20
// once masked with 0x87F00000: that fp32 is exactly e4m3 * 2^-120 (e4m3
// subnormals land on fp32 subnormals). Multiplying by scale * 2^120 (exact
// while |scale| < 2^8, checked by the caller) rounds e4m3 * scale once, as
// the scalar decode does. 0x7f/0xff (NaN) are patched in where present.
struct DecFP8 {
  static constexpr int64_t kGroup = 128;
  static constexpr bool kNanCheck = true;
  struct Row {
    const uint8_t* p;
    const float* gs;  // scale * 2^120 per 128-column block
  };
  using Mult = __m512;
  static int64_t stage_size(int64_t cols) { return (cols + 127) / 128; }
  static Row row(const WeightView& w, int64_t o, float* stage) {
    const float* s = reinterpret_cast<const float*>(w.scales) +
                     ((w.scale_row0 + o) / 128) * w.scale_stride;
    const int64_t n = stage_size(w.cols);
    for (int64_t i = 0; i < n; ++i) stage[i] = s[i] * 0x1p120f;
    return {w.data + o * w.cols, stage};
  }
  static Mult mult(const Row& r, int64_t g) { return _mm512_set1_ps(r.gs[g]); }
  static __m512 bits(__m128i q, Mult m) {
    const __m512i d = _mm512_slli_epi32(_mm512_cvtepi8_epi32(q), 20);
    const __m512i b = _mm512_and_si512(d, _mm512_set1_epi32(static_cast<int>(0x87F00000u)));
    return _mm512_mul_ps(_mm512_castsi512_ps(b), m);
  }
  static __mmask16 nan_mask(__m128i q) {
    // (q + 1) & 0x7f == 0  <=>  q is 0x7f or 0xff
    return _mm_testn_epi8_mask(_mm_add_epi8(q, _mm_set1_epi8(1)), _mm_set1_epi8(0x7f));
  }
  static __m512 patch(__m512 w, __m128i q) {
    return _mm512_mask_mov_ps(w, nan_mask(q), _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  }
  template <bool kNan>
  static __m512 vec(const Row& r, Mult m, int64_t c) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r.p + c));
    if constexpr (kNan) return patch(bits(q, m), q);
    return bits(q, m);
  }
  static __m512 vec_tail(const Row& r, Mult m, int64_t c, int t) {
    const __m128i q = _mm_maskz_loadu_epi8(tail_mask(t), r.p + c);
    return patch(bits(q, m), q);
  }
  static bool has_nan(const Row& r, int64_t c, int64_t len) {
    const __m512i one = _mm512_set1_epi8(1), low = _mm512_set1_epi8(0x7f);
    uint64_t any = 0;
    for (int64_t j = 0; j < len; j += 64) {
      const int64_t n = std::min<int64_t>(64, len - j);
      const __mmask64 k = n == 64 ? ~0ull : (1ull << n) - 1;
      const __m512i q = _mm512_maskz_loadu_epi8(k, r.p + c + j);
      any |= _mm512_mask_testn_epi8_mask(k, _mm512_add_epi8(q, one), low);
    }
    return any != 0;
  }
};

// INT4 and MXFP4 share the nibble layout (element 2b low nibble of byte b).
// For 16 elements (8 bytes): broadcast the 8 bytes to every qword, and
// vpmultishiftqb moves nibble k to the low bits of dword lane k; vpermps
// uses only those 4 bits to pick the weight from a 16-entry table already
// multiplied by the group's scale (each entry one exact/once-rounded product,
// the same as the scalar decode's).
inline __m512i nibble_ctrl() {
  return _mm512_set_epi64(0x3c00000038ll, 0x3400000030ll, 0x2c00000028ll, 0x2400000020ll,
                          0x1c00000018ll, 0x1400000010ll, 0x0c00000008ll, 0x0400000000ll);
}

inline __m512 nibble_lookup(const uint8_t* p, __m512 table) {
  uint64_t q;
  std::memcpy(&q, p, 8);
  const __m512i idx = _mm512_multishift_epi64_epi8(nibble_ctrl(), _mm512_set1_epi64(static_cast<long long>(q)));
  return _mm512_permutexvar_ps(idx, table);
}

struct DecNibble {
  static constexpr int64_t kGroup = 32;
  static constexpr bool kNanCheck = false;
  struct Row {
    const uint8_t* p;
    const float* gs;  // fp32 scale per group of 32
  };
  using Mult = __m512;
  static int64_t stage_size(int64_t cols) { return cols / 32; }
  template <bool>
  static __m512 vec(const Row& r, Mult m, int64_t c) { return nibble_lookup(r.p + c / 2, m); }
  static __m512 vec_tail(const Row& r, Mult m, int64_t c, int) { return vec<false>(r, m, c); }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
};

struct DecInt4 : DecNibble {
  static Row row(const WeightView& w, int64_t o, float* stage) {
    const int64_t ng = w.cols / 32;
    const uint8_t* s = w.scales + o * ng * 2;
    int64_t g = 0;
    for (; g + 16 <= ng; g += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * g));
      _mm512_storeu_ps(stage + g, DecBF16::widen(h));
    }
    for (; g < ng; ++g) {
      uint16_t h;
      std::memcpy(&h, s + 2 * g, 2);
      stage[g] = bf16_to_float(h);
    }
    return {w.data + o * (w.cols / 2), stage};
  }
  static Mult mult(const Row& r, int64_t g) {
    const __m512 q = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm512_mul_ps(q, _mm512_set1_ps(r.gs[g]));
  }
};

struct DecMxfp4 : DecNibble {
  static Row row(const WeightView& w, int64_t o, float* stage) {
    const int64_t ng = w.cols / 32;
    const uint8_t* s = w.scales + o * ng;
    for (int64_t g = 0; g < ng; ++g) stage[g] = e8m0_to_float(s[g]);
    return {w.data + o * (w.cols / 2), stage};
  }
  static Mult mult(const Row& r, int64_t g) {
    const __m512 e2m1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                       -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(e2m1, _mm512_set1_ps(r.gs[g]));
  }
};

#include "kernels/kernels_tile.h"

// FP8 scales of at least 2^8 (never seen in published checkpoints) would make
// scale * 2^120 overflow; such rows are decoded by the scalar decode.
bool fp8_scales_in_range(const WeightView& w, int64_t o_begin, int64_t o_end) {
  const float* s = reinterpret_cast<const float*>(w.scales);
  for (int64_t sr = (w.scale_row0 + o_begin) / 128; sr <= (w.scale_row0 + o_end - 1) / 128; ++sr)
    for (int64_t c = 0; c < (w.cols + 127) / 128; ++c) {
      const float v = s[sr * w.scale_stride + c];
      if (std::isfinite(v) && !(std::abs(v) < 0x1p8f)) return false;
    }
  return true;
}

void matmul_rows_decoded(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                         int64_t n_rows, int64_t xs, float* y, int64_t ys) {
  AlignedArray<float> row(static_cast<size_t>(w.cols));
  const EncodingTraits& t = traits(w.enc);
  for (int64_t o = o_begin; o < o_end; ++o) {
    t.decode_row(w, o, row.data());
    const DecF32::Row rows[1] = {{reinterpret_cast<const uint8_t*>(row.data()), nullptr}};
    tile_rows<V, DecF32, 1>(rows, w.cols, x, n_rows, xs, y + o, ys);
  }
}

}  // namespace

void matmul_rows_avx512(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                        int64_t n_rows, int64_t x_stride, float* y, int64_t y_stride) {
  switch (w.enc) {
    case Encoding::F32:
      return matmul_rows_with<V, DecF32, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::BF16:
      return matmul_rows_with<V, DecBF16, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::FP8_B128:
      if (!fp8_scales_in_range(w, o_begin, o_end))
        return matmul_rows_decoded(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
      return matmul_rows_with<V, DecFP8, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::INT4_G32:
      return matmul_rows_with<V, DecInt4, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::MXFP4_G32:
      return matmul_rows_with<V, DecMxfp4, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
  }
}

}  // namespace deltafin::kernels::detail
