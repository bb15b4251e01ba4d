// AVX2 + FMA + F16C matmul_rows: the 16 canonical lanes of each output
// element live in two ymm registers (lanes 0-7 and 8-15); weights are decoded
// exactly to fp32, so results are bit-identical to the scalar reference.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/kernels_internal.h"
#include "util/aligned.h"

namespace deltafin::kernels::detail {
namespace {

#define DF_KERNEL_INLINE inline __attribute__((always_inline))

// Lane masks for the first t of 8 lanes (t may be <= 0 or >= 8).
inline __m256i lane_mask(int t) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(t), idx);
}

struct V {
  struct reg {
    __m256 lo, hi;  // canonical lanes 0-7, 8-15
  };
  static constexpr int kMaxR = 2, kOB = 2, kOBDecode = 4;
  static reg zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static reg load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static reg load_tail(const float* p, int t) {
    return {_mm256_maskload_ps(p, lane_mask(t)), _mm256_maskload_ps(p + 8, lane_mask(t - 8))};
  }
  static void store(float* p, reg v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static reg fma(reg w, reg x, reg acc) {
    return {_mm256_fmadd_ps(w.lo, x.lo, acc.lo), _mm256_fmadd_ps(w.hi, x.hi, acc.hi)};
  }
  // Lanes >= t keep acc.
  static reg fma_tail(reg w, reg x, reg acc, int t) {
    const reg f = fma(w, x, acc);
    return {_mm256_blendv_ps(acc.lo, f.lo, _mm256_castsi256_ps(lane_mask(t))),
            _mm256_blendv_ps(acc.hi, f.hi, _mm256_castsi256_ps(lane_mask(t - 8)))};
  }
  // The canonical tree: s8 = acc[l] + acc[l+8], s4, s2, s2[0] + s2[1].
  static float reduce(reg a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
};

struct NoMult {};

struct RowPtr {
  const uint8_t* p;
  const float* gs;
};

// Tail bytes copied into a zeroed 64-byte block, so decodes never read past
// the row.
struct TailBytes {
  alignas(32) uint8_t b[64] = {};
  TailBytes(const uint8_t* p, int n) { std::memcpy(b, p, static_cast<size_t>(n)); }
};

struct DecF32 {
  static constexpr int64_t kGroup = 64;
  static constexpr int64_t kGroupBytes = 256;
  static constexpr bool kPrefetch = true;
  static constexpr bool kNanCheck = false;
  using Row = RowPtr;
  using Mult = NoMult;
  static int64_t stage_size(int64_t) { return 0; }
  static Row row(const WeightView& w, int64_t o, float*) { return {w.data + o * w.cols * 4, nullptr}; }
  static Mult mult(const Row&, int64_t) { return {}; }
  template <bool>
  static V::reg vec(const Row& r, Mult, int64_t c) {
    return V::load(reinterpret_cast<const float*>(r.p) + c);
  }
  static V::reg vec_tail(const Row& r, Mult, int64_t c, int t) {
    TailBytes tb(r.p + 4 * c, 4 * t);
    return V::load(reinterpret_cast<const float*>(tb.b));
  }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
};

struct DecBF16 {
  static constexpr int64_t kGroup = 64;
  static constexpr int64_t kGroupBytes = 128;
  static constexpr bool kPrefetch = true;
  static constexpr bool kNanCheck = false;
  using Row = RowPtr;
  using Mult = NoMult;
  static int64_t stage_size(int64_t) { return 0; }
  static Row row(const WeightView& w, int64_t o, float*) { return {w.data + o * w.cols * 2, nullptr}; }
  static Mult mult(const Row&, int64_t) { return {}; }
  static __m256 widen8(const uint8_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  template <bool>
  static V::reg vec(const Row& r, Mult, int64_t c) {
    return {widen8(r.p + 2 * c), widen8(r.p + 2 * c + 16)};
  }
  static V::reg vec_tail(const Row& r, Mult m, int64_t c, int t) {
    TailBytes tb(r.p + 2 * c, 2 * t);
    return vec<false>(Row{tb.b - 2 * c, nullptr}, m, c);
  }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
};

// FP8 e4m3: the byte s.eeee.mmm, sign-extended to 16 bits, shifted left by 7
// and masked with 0xBF80 is the fp16 s.0eeee.mmm0000000 = e4m3 * 2^-8 exactly
// (subnormals included); vcvtph2ps makes it fp32, and multiplying by
// scale * 2^8 (exact while |scale| < 2^119; the caller checks) rounds
// e4m3 * scale once, as the scalar decode does. NaN codes (0x7f/0xff) are
// patched in as the quiet NaN of their sign where a group has any.
struct DecFP8 {
  static constexpr int64_t kGroup = 128;
  static constexpr bool kNanCheck = true;
  using Row = RowPtr;  // gs: scale * 2^8 per 128-column block
  using Mult = __m256;
  static int64_t stage_size(int64_t cols) { return (cols + 127) / 128; }
  static Row row(const WeightView& w, int64_t o, float* stage) {
    const float* s = reinterpret_cast<const float*>(w.scales) +
                     ((w.scale_row0 + o) / 128) * w.scale_stride;
    const int64_t n = stage_size(w.cols);
    for (int64_t i = 0; i < n; ++i) stage[i] = s[i] * 0x1p8f;
    return {w.data + o * w.cols, stage};
  }
  static Mult mult(const Row& r, int64_t g) { return _mm256_set1_ps(r.gs[g]); }
  // 16 bytes at once: sign-extended to 16 words, shifted and masked into 16
  // fp16s, converted by halves.
  template <bool kNan>
  static V::reg decode16(__m128i bytes, Mult m) {
    const __m256i q = _mm256_cvtepi8_epi16(bytes);
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(q, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
    const __m256 f0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    const __m256 f1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    V::reg w{_mm256_mul_ps(f0, m), _mm256_mul_ps(f1, m)};
    if constexpr (!kNan) return w;
    // (q & 0x7f) == 0x7f on the sign-extended words: the quiet NaN of q's sign
    const __m256i is_nan = _mm256_cmpeq_epi16(_mm256_and_si256(q, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
    const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
    const __m256 n0 = _mm256_or_ps(_mm256_and_ps(f0, _mm256_set1_ps(-0.0f)), qnan);
    const __m256 n1 = _mm256_or_ps(_mm256_and_ps(f1, _mm256_set1_ps(-0.0f)), qnan);
    w.lo = _mm256_blendv_ps(w.lo, n0, _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(is_nan))));
    w.hi = _mm256_blendv_ps(w.hi, n1, _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(is_nan, 1))));
    return w;
  }
  template <bool kNan>
  static V::reg vec(const Row& r, Mult m, int64_t c) {
    return decode16<kNan>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.p + c)), m);
  }
  static V::reg vec_tail(const Row& r, Mult m, int64_t c, int t) {
    TailBytes tb(r.p + c, t);
    return decode16<true>(_mm_load_si128(reinterpret_cast<const __m128i*>(tb.b)), m);
  }
  static bool has_nan(const Row& r, int64_t c, int64_t len) {
    int any = 0;
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.p + c + j));
      // q | 0x80 == 0xff  <=>  q is 0x7f or 0xff
      any |= _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_or_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))),
                                                    _mm256_set1_epi8(static_cast<char>(0xff))));
    }
    for (; j < len; ++j) any |= (r.p[c + j] & 0x7f) == 0x7f;
    return any != 0;
  }
};

// INT4 / MXFP4: 8 elements are 4 bytes; broadcast them to every lane and
// shift lane k right by 4k: lane k's low 4 bits are element k.
inline __m256i nibble_lanes(const uint8_t* p) {
  uint32_t d;
  std::memcpy(&d, p, 4);
  return _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(d)),
                           _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
}

struct DecNibble {
  static constexpr int64_t kGroup = 32;
  static constexpr bool kNanCheck = false;
  using Row = RowPtr;  // gs: fp32 scale per group of 32
  static int64_t stage_size(int64_t cols) { return cols / 32; }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
};

// (nibble - 8) * scale: or'ing the nibble into the mantissa of 2^23 gives
// 2^23 + nibble exactly, minus 2^23 + 8 is nibble - 8 exactly, and one
// multiply rounds as the scalar decode does.
struct DecInt4 : DecNibble {
  using Mult = __m256;
  static Row row(const WeightView& w, int64_t o, float* stage) {
    const int64_t ng = w.cols / 32;
    const uint8_t* s = w.scales + o * ng * 2;
    for (int64_t g = 0; g < ng; ++g) {
      uint16_t h;
      std::memcpy(&h, s + 2 * g, 2);
      stage[g] = bf16_to_float(h);
    }
    return {w.data + o * (w.cols / 2), stage};
  }
  static Mult mult(const Row& r, int64_t g) { return _mm256_set1_ps(r.gs[g]); }
  static __m256 half(const uint8_t* p, Mult m) {
    const __m256i n = _mm256_and_si256(nibble_lanes(p), _mm256_set1_epi32(0xF));
    const __m256 f = _mm256_castsi256_ps(_mm256_or_si256(n, _mm256_set1_epi32(0x4B000000)));
    return _mm256_mul_ps(_mm256_sub_ps(f, _mm256_set1_ps(8388616.0f)), m);
  }
  template <bool>
  static V::reg vec(const Row& r, Mult m, int64_t c) {
    return {half(r.p + c / 2, m), half(r.p + c / 2 + 4, m)};
  }
  static V::reg vec_tail(const Row& r, Mult m, int64_t c, int) { return vec<false>(r, m, c); }
};

// E2M1 magnitude by vpermps from an 8-entry table already multiplied by the
// group's scale (exact: a power of two), sign from bit 3.
struct DecMxfp4 : DecNibble {
  using Mult = __m256;
  static Row row(const WeightView& w, int64_t o, float* stage) {
    const int64_t ng = w.cols / 32;
    const uint8_t* s = w.scales + o * ng;
    for (int64_t g = 0; g < ng; ++g) stage[g] = e8m0_to_float(s[g]);
    return {w.data + o * (w.cols / 2), stage};
  }
  static Mult mult(const Row& r, int64_t g) {
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    return _mm256_mul_ps(mag, _mm256_set1_ps(r.gs[g]));
  }
  static __m256 half(const uint8_t* p, Mult m) {
    const __m256i n = nibble_lanes(p);
    const __m256 mag = _mm256_permutevar8x32_ps(m, n);  // uses the low 3 bits
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(n, 28), _mm256_set1_epi32(INT32_MIN));
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
  }
  template <bool>
  static V::reg vec(const Row& r, Mult m, int64_t c) {
    return {half(r.p + c / 2, m), half(r.p + c / 2 + 4, m)};
  }
  static V::reg vec_tail(const Row& r, Mult m, int64_t c, int) { return vec<false>(r, m, c); }
};

#include "kernels/kernels_tile.h"

// FP8 scales of at least 2^119 (never seen in published checkpoints) would
// make scale * 2^8 overflow; such rows go through the scalar decode.
bool fp8_scales_in_range(const WeightView& w, int64_t o_begin, int64_t o_end) {
  const float* s = reinterpret_cast<const float*>(w.scales);
  for (int64_t sr = (w.scale_row0 + o_begin) / 128; sr <= (w.scale_row0 + o_end - 1) / 128; ++sr)
    for (int64_t c = 0; c < (w.cols + 127) / 128; ++c) {
      const float v = s[sr * w.scale_stride + c];
      if (std::isfinite(v) && !(std::abs(v) < 0x1p119f)) return false;
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

void matmul_rows_avx2(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
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

float dot_avx2(const float* a, const float* b, int64_t n) { return dot_with<V, DecF32>(a, b, n); }

void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

}  // namespace deltafin::kernels::detail
