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
  static constexpr int kMaxR = 4, kOB = 4, kOBDecode = 8;
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

#define DF_KERNEL_INLINE inline __attribute__((always_inline))

struct NoMult {};

struct DecF32 {
  static constexpr int64_t kGroup = 64;
  static constexpr int64_t kGroupBytes = 256;
  static constexpr bool kPrefetch = true;
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
  static constexpr int64_t kGroup = 64;
  static constexpr int64_t kGroupBytes = 128;
  static constexpr bool kPrefetch = true;
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

// FP8 e4m3 by table lookup (VBMI). Every e4m3 value is exactly a bf16, and
// vpermi2b looks up 64 bytes at once in a 128-entry byte table indexed by
// the low 7 bits: one lookup gives the bf16's high bytes, one its low bytes;
// the sign is or'ed into the high byte; then one vpermt2b per 16 elements
// interleaves (0, 0, low, high) into fp32 lanes. 0x7f/0xff come out as
// +/-qNaN (0x7fc0 in the table), as the scalar decode has them, and e4m3
// subnormals as normal floats. w = that * scale is the scalar decode's
// single rounding.
constexpr uint16_t e4m3_bf16(int q7) {
  const int e = q7 >> 3, m = q7 & 7;
  if (q7 == 0x7f) return 0x7fc0;
  if (e > 0) return static_cast<uint16_t>((e + 120) << 7 | m << 4);
  if (m == 0) return 0;
  const int p = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m * 2^-9 = 2^(p-9) * (m / 2^p)
  return static_cast<uint16_t>((118 + p) << 7 | (m - (1 << p)) << (7 - p));
}

struct E4m3Tables {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
  alignas(64) uint8_t ctrl[4][64];  // vpermt2b: fp32 lane i of register k
  constexpr E4m3Tables() : hi(), lo(), ctrl() {
    for (int q = 0; q < 128; ++q) {
      hi[q] = static_cast<uint8_t>(e4m3_bf16(q) >> 8);
      lo[q] = static_cast<uint8_t>(e4m3_bf16(q) & 0xff);
    }
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 16; ++i) {
        ctrl[k][4 * i + 2] = static_cast<uint8_t>(16 * k + i);       // low byte: source a
        ctrl[k][4 * i + 3] = static_cast<uint8_t>(64 + 16 * k + i);  // high byte: source b
      }
  }
};
constexpr E4m3Tables kE4m3{};
// Bytes 2 and 3 of every dword.
constexpr __mmask64 kHighHalves = 0xCCCCCCCCCCCCCCCCull;

struct DecFP8 {
  static constexpr int64_t kGroup = 128;
  static constexpr int64_t kChunk = 64;
  static constexpr bool kNanCheck = false;
  struct Row {
    const uint8_t* p;
    const float* gs;  // the scale of each 128-column block
  };
  using Mult = __m512;
  static int64_t stage_size(int64_t cols) { return (cols + 127) / 128; }
  static Row row(const WeightView& w, int64_t o, float* stage) {
    const float* s = reinterpret_cast<const float*>(w.scales) +
                     ((w.scale_row0 + o) / 128) * w.scale_stride;
    std::memcpy(stage, s, static_cast<size_t>(stage_size(w.cols)) * 4);
    return {w.data + o * w.cols, stage};
  }
  static Mult mult(const Row& r, int64_t g) { return _mm512_set1_ps(r.gs[g]); }
  // Registers k < K of the 64 bytes q (elements 16k .. 16k+15).
  template <int K>
  DF_KERNEL_INLINE static void decode(__m512i q, Mult m, __m512* out) {
    const __m512i thi0 = _mm512_load_si512(kE4m3.hi), thi1 = _mm512_load_si512(kE4m3.hi + 64);
    const __m512i tlo0 = _mm512_load_si512(kE4m3.lo), tlo1 = _mm512_load_si512(kE4m3.lo + 64);
    const __m512i lo = _mm512_permutex2var_epi8(tlo0, q, tlo1);
    // hi | (q & 0x80): ternary logic A | (B & C) = 0xF8
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(thi0, q, thi1), q,
                                                 _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
#pragma GCC unroll 4
    for (int k = 0; k < K; ++k) {
      const __m512i ctrl = _mm512_load_si512(kE4m3.ctrl[k]);
      const __m512i f = _mm512_maskz_permutex2var_epi8(kHighHalves, lo, ctrl, hi);
      out[k] = _mm512_mul_ps(_mm512_castsi512_ps(f), m);
    }
  }
  DF_KERNEL_INLINE static void chunk(const Row& r, Mult m, int64_t c, __m512* out) {
    decode<4>(_mm512_loadu_si512(r.p + c), m, out);
  }
  template <bool>
  static __m512 vec(const Row& r, Mult m, int64_t c) {
    __m512 w;
    decode<1>(_mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.p + c))), m, &w);
    return w;
  }
  static __m512 vec_tail(const Row& r, Mult m, int64_t c, int t) {
    __m512 w;
    decode<1>(_mm512_castsi128_si512(_mm_maskz_loadu_epi8(tail_mask(t), r.p + c)), m, &w);
    return w;
  }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
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
  // Decode order: the 8 bytes of 16 elements broadcast to every qword (a
  // load, no shuffle), qword lane j shifted right by 4j: its low dword then
  // holds nibble j, its high dword nibble j + 8. So lane L holds element
  // perm[L] = {0, 8, 1, 9, ..., 7, 15}; vpermps needs only those low 4 bits.
  static constexpr bool kPermuted = true;
  struct Row {
    const uint8_t* p;
    const float* gs;  // fp32 scale per group of 32
  };
  using Mult = __m512;
  static int64_t stage_size(int64_t cols) { return cols / 32; }
  static __m512i lanes(const uint8_t* p) {
    uint64_t q;
    std::memcpy(&q, p, 8);
    return _mm512_srlv_epi64(_mm512_set1_epi64(static_cast<long long>(q)),
                             _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28));
  }
  template <bool>
  static __m512 vec(const Row& r, Mult m, int64_t c) {
    return _mm512_permutexvar_ps(lanes(r.p + c / 2), m);
  }
  static __m512 vec_tail(const Row& r, Mult m, int64_t c, int) { return vec<false>(r, m, c); }
  static __m512 vec_canonical(const Row& r, Mult m, int64_t c) { return nibble_lookup(r.p + c / 2, m); }
  static bool has_nan(const Row&, int64_t, int64_t) { return false; }
  // x'[16t + L] = x[16t + perm[L]]
  static void permute_x(const float* x, float* out, int64_t cols) {
    const __m512i perm = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    for (int64_t c = 0; c < cols; c += 16)
      _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(x + c)));
  }
  // canonical lane l = permuted lane perm^-1[l]
  static __m512 unpermute(__m512 acc) {
    const __m512i inv = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    return _mm512_permutexvar_ps(inv, acc);
  }
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
    int64_t g = 0;
    for (; g + 16 <= ng; g += 16) {
      // 2^(s-127) is the float with exponent field s; s = 0 is 2^-127.
      const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + g)));
      const __m512i b = _mm512_mask_mov_epi32(_mm512_slli_epi32(e, 23), _mm512_testn_epi32_mask(e, e),
                                              _mm512_set1_epi32(0x00400000));
      _mm512_storeu_si512(stage + g, b);
    }
    for (; g < ng; ++g) stage[g] = e8m0_to_float(s[g]);
    return {w.data + o * (w.cols / 2), stage};
  }
  static Mult mult(const Row& r, int64_t g) {
    const __m512 e2m1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                       -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(e2m1, _mm512_set1_ps(r.gs[g]));
  }
};

#include "kernels/kernels_tile.h"

}  // namespace

void matmul_rows_avx512(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                        int64_t n_rows, int64_t x_stride, float* y, int64_t y_stride) {
  switch (w.enc) {
    case Encoding::F32:
      return matmul_rows_with<V, DecF32, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::BF16:
      return matmul_rows_with<V, DecBF16, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::FP8_B128:
      return matmul_rows_with<V, DecFP8, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::INT4_G32:
      return matmul_rows_with<V, DecInt4, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
    case Encoding::MXFP4_G32:
      return matmul_rows_with<V, DecMxfp4, DecF32>(w, o_begin, o_end, x, n_rows, x_stride, y, y_stride);
  }
}

float dot_avx512(const float* a, const float* b, int64_t n) { return dot_with<V, DecF32>(a, b, n); }

void axpy_avx512(float a, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(static_cast<int>(n - i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

}  // namespace deltafin::kernels::detail
