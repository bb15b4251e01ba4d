// The blocked product shared by the SIMD kernels, written once over an ISA
// (V: a 16-lane fp32 register and its operations) and a weight decoder (D).
//
// INCLUDE ONLY INSIDE AN ANONYMOUS NAMESPACE of a translation unit compiled
// for one ISA, after defining V and the decoders: every TU gets its own copy,
// so code compiled for AVX-512 never leaks into the AVX2 path through ODR.
//
// Canonical order (kernels.h): register lane l of acc[b][r] holds the lane
// accumulator acc[l] of output (o + b, row r); element i of the reduction is
// fma'd into lane i % 16 in increasing i. The tile shape (OB output rows x R
// activation rows) changes only which independent dots run together.
//
// A decoder D provides:
//   kGroup            elements per scale group (the unit of D::mult)
//   kNanCheck         whether some codes decode to NaN (FP8)
//   Row               one weight row: byte pointer + staged group scales
//   Mult              per-(row, group) decode state (a scale, a scaled table)
//   mult(row, g)      Mult for group g
//   vec<kNan>(row, m, c)   weights [c, c + 16) as a V::reg
//   vec_tail(row, m, c, t) weights [c, c + t), t < 16, lanes >= t are 0
//   chunk(row, m, c, out)  optional: kChunk elements into kChunk/16 registers
// and, where kPermuted is true, decodes whose register lane L holds element
// perm[L] of each 16-element block (cheaper to produce): the activations are
// permuted the same way once per call (permute_x), so lane L still sees one
// canonical lane's elements in index order, and unpermute() puts the lanes
// back before the canonical reduction tree. vec_canonical() is the decode in
// plain order (for decode_row_simd).
//   has_nan(row, c, len)   any NaN code in [c, c + len)   (if kNanCheck)

#ifndef DF_KERNEL_INLINE
#define DF_KERNEL_INLINE inline __attribute__((always_inline))
#endif

template <class D>
constexpr bool permuted() {
  if constexpr (requires { D::kPermuted; })
    return D::kPermuted;
  else
    return false;
}

// Tile shapes come from V (they depend on the register count):
//   V::kMaxR      activation rows per tile
//   V::kOB        output rows per tile
//   V::kOBDecode  output rows per tile when there is one activation row: each
//                 output row is then a single dependency chain of fmas (one
//                 per 16 elements), so more rows in flight hide the fma
//                 latency and keep more weight streams going.

template <class V, class D, int OB, int R, bool kNan, int64_t kLen>
DF_KERNEL_INLINE void group_fma(const typename D::Row (&rows)[OB], const typename D::Mult (&m)[OB],
                      int64_t c0, int64_t len, const float* const (&xr)[R],
                      typename V::reg (&acc)[OB][R]) {
  const int64_t n = kLen > 0 ? kLen : len;
  int64_t j = 0;
  if constexpr (requires { D::kChunk; }) {
    // D decodes kChunk elements (K registers) at once, sharing table lookups.
    constexpr int K = D::kChunk / 16;
#pragma GCC unroll 4
    for (; j + D::kChunk <= n; j += D::kChunk) {
#pragma GCC unroll 8
      for (int b = 0; b < OB; ++b) {
        typename V::reg wv[K];
        D::chunk(rows[b], m[b], c0 + j, wv);
#pragma GCC unroll 8
        for (int k = 0; k < K; ++k)
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r)
            acc[b][r] = V::fma(wv[k], V::load(xr[r] + c0 + j + 16 * k), acc[b][r]);
      }
    }
  }
#pragma GCC unroll 8
  for (; j + 16 <= n; j += 16) {
    typename V::reg xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = V::load(xr[r] + c0 + j);
#pragma GCC unroll 8
    for (int b = 0; b < OB; ++b) {
      const typename V::reg wv = D::template vec<kNan>(rows[b], m[b], c0 + j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[b][r] = V::fma(wv, xv[r], acc[b][r]);
    }
  }
  if constexpr (kLen % 16 != 0 || kLen == 0) {
    if (j < n) {
      const int t = static_cast<int>(n - j);
      typename V::reg xv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) xv[r] = V::load_tail(xr[r] + c0 + j, t);
#pragma GCC unroll 8
      for (int b = 0; b < OB; ++b) {
        const typename V::reg wv = D::vec_tail(rows[b], m[b], c0 + j, t);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[b][r] = V::fma_tail(wv, xv[r], acc[b][r], t);
      }
    }
  }
}

template <class V, class D, int OB, int R, bool kNan, int64_t kLen>
DF_KERNEL_INLINE void group_any(const typename D::Row (&rows)[OB], int64_t g, int64_t len,
                      const float* const (&xr)[R], typename V::reg (&acc)[OB][R]) {
  typename D::Mult m[OB];
#pragma GCC unroll 8
  for (int b = 0; b < OB; ++b) m[b] = D::mult(rows[b], g);
  group_fma<V, D, OB, R, kNan, kLen>(rows, m, g * D::kGroup, len, xr, acc);
}

// y[r * ys + b] = dot(row b, x[r * xs ...]) for b < OB, r < R.
template <class V, class D, int OB, int R>
void tile(const typename D::Row (&rows)[OB], int64_t cols, const float* x, int64_t xs, float* y,
          int64_t ys) {
  typename V::reg acc[OB][R];
#pragma GCC unroll 8
  for (int b = 0; b < OB; ++b)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[b][r] = V::zero();
  const float* xr[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) xr[r] = x + r * xs;
  const int64_t full = cols / D::kGroup, rem = cols % D::kGroup;
  for (int64_t g = 0; g <= full; ++g) {
    const int64_t len = g < full ? D::kGroup : rem;
    if (len == 0) break;
    bool nan = false;
    if constexpr (D::kNanCheck) {
#pragma GCC unroll 8
      for (int b = 0; b < OB; ++b) nan |= D::has_nan(rows[b], g * D::kGroup, len);
    }
    if (len == D::kGroup) {
      if (nan)
        group_any<V, D, OB, R, true, D::kGroup>(rows, g, len, xr, acc);
      else
        group_any<V, D, OB, R, false, D::kGroup>(rows, g, len, xr, acc);
    } else {
      if (nan)
        group_any<V, D, OB, R, true, 0>(rows, g, len, xr, acc);
      else
        group_any<V, D, OB, R, false, 0>(rows, g, len, xr, acc);
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < OB; ++b)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (permuted<D>())
        y[r * ys + b] = V::reduce(D::unpermute(acc[b][r]));
      else
        y[r * ys + b] = V::reduce(acc[b][r]);
    }
}

// Decodes one row exactly into out[0, cols), zero-padded to a multiple of 16.
template <class V, class D>
void decode_row_simd(const typename D::Row& row, int64_t cols, float* out) {
  const int64_t ng = (cols + D::kGroup - 1) / D::kGroup;
  for (int64_t g = 0; g < ng; ++g) {
    const typename D::Mult m = D::mult(row, g);
    const int64_t c0 = g * D::kGroup, len = std::min<int64_t>(D::kGroup, cols - c0);
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
      if constexpr (permuted<D>())
        V::store(out + c0 + j, D::vec_canonical(row, m, c0 + j));
      else
        V::store(out + c0 + j, D::template vec<true>(row, m, c0 + j));
    }
    if (j < len) V::store(out + c0 + j, D::vec_tail(row, m, c0 + j, static_cast<int>(len - j)));
  }
}

template <class V, class D, int OB>
void tile_rows(const typename D::Row (&rows)[OB], int64_t cols, const float* x, int64_t n_rows,
               int64_t xs, float* y, int64_t ys) {
  constexpr int kMaxR = V::kMaxR;
  if constexpr (OB > V::kOB) {  // decode-only tile shape
    for (int64_t r = 0; r < n_rows; ++r) tile<V, D, OB, 1>(rows, cols, x + r * xs, xs, y + r * ys, ys);
    return;
  }
  int64_t r = 0;
  for (; r + kMaxR <= n_rows; r += kMaxR)
    tile<V, D, OB, kMaxR>(rows, cols, x + r * xs, xs, y + r * ys, ys);
  if constexpr (kMaxR > 1)
    if (n_rows - r == 1) tile<V, D, OB, 1>(rows, cols, x + r * xs, xs, y + r * ys, ys);
  if constexpr (kMaxR > 2)
    if (n_rows - r == 2) tile<V, D, OB, 2>(rows, cols, x + r * xs, xs, y + r * ys, ys);
  if constexpr (kMaxR > 3)
    if (n_rows - r == 3) tile<V, D, OB, 3>(rows, cols, x + r * xs, xs, y + r * ys, ys);
  static_assert(kMaxR <= 4);
}

// The ISA's matmul_rows for decoder D. DF32 is the same ISA's F32 decoder,
// used on rows decoded once into scratch when there are more activation rows
// than one tile holds (prefill): decoding is exact, so the product is the
// same whichever way the weights reach the registers.
template <class V, class D, class DF32>
void matmul_rows_with(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                      int64_t n_rows, int64_t xs, float* y, int64_t ys) {
  const int64_t stage_per_row = D::stage_size(w.cols);
  constexpr int kOB = V::kOB, kOBDecode = V::kOBDecode;
  AlignedArray<float> stage;
  if (stage_per_row > 0) stage = AlignedArray<float>(static_cast<size_t>(kOBDecode * stage_per_row));
  const bool via_scratch = !std::is_same_v<D, DF32> && n_rows > V::kMaxR;
  const int64_t padded = (w.cols + 15) / 16 * 16;
  AlignedArray<float> scratch;
  if (via_scratch) scratch = AlignedArray<float>(static_cast<size_t>(kOB * padded));
  // Activations in the decoder's lane order (see kPermuted above).
  AlignedArray<float> xperm;
  if constexpr (permuted<D>()) {
    if (!via_scratch) {
      xperm = AlignedArray<float>(static_cast<size_t>(n_rows * w.cols));
      for (int64_t r = 0; r < n_rows; ++r) D::permute_x(x + r * xs, xperm.data() + r * w.cols, w.cols);
      x = xperm.data();
      xs = w.cols;
    }
  }
  int64_t o = o_begin;
  auto run = [&]<int OB>(std::integral_constant<int, OB>) {
    typename D::Row rows[OB];
    for (int b = 0; b < OB; ++b) rows[b] = D::row(w, o + b, stage.data() + b * stage_per_row);
    if (!via_scratch) {
      tile_rows<V, D, OB>(rows, w.cols, x, n_rows, xs, y + o, ys);
      return;
    }
    typename DF32::Row frows[OB];
    for (int b = 0; b < OB; ++b) {
      decode_row_simd<V, D>(rows[b], w.cols, scratch.data() + b * padded);
      frows[b] = typename DF32::Row{reinterpret_cast<const uint8_t*>(scratch.data() + b * padded), nullptr};
    }
    tile_rows<V, DF32, OB>(frows, w.cols, x, n_rows, xs, y + o, ys);
  };
  if (n_rows == 1)
    for (; o + kOBDecode <= o_end; o += kOBDecode) run(std::integral_constant<int, kOBDecode>{});
  for (; o + kOB <= o_end; o += kOB) run(std::integral_constant<int, kOB>{});
  for (; o < o_end; ++o) run(std::integral_constant<int, 1>{});
}

// The canonical dot product of two fp32 vectors: a one-row, one-output tile.
template <class V, class DF32>
float dot_with(const float* a, const float* b, int64_t n) {
  const typename DF32::Row rows[1] = {{reinterpret_cast<const uint8_t*>(a), nullptr}};
  float y = 0.0f;
  tile<V, DF32, 1, 1>(rows, n, b, n, &y, 1);
  return y;
}
