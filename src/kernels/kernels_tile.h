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
//   kPrefetch, kGroupBytes  optional: prefetch the rows in decode tiles;
//                     bytes of one row's data per group
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

// With one activation row, each weight row of a tile is prefetched this far
// ahead by decoders that ask (kPrefetch). Measured (bench/results/kernels-*.md):
// bf16 gained ~15%; int4 lost ~10% and fp8/mxfp4 were unchanged, so those
// leave it to the hardware prefetchers.
constexpr int64_t kPrefetchBytes = 1024;

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

// Continues the accumulators over columns [c_begin, c_end): element i goes
// into lane i % 16 of acc[b][r], in increasing i. c_begin is a multiple of
// D::kGroup, so stopping and resuming between spans changes nothing.
template <class V, class D, int OB, int R>
DF_KERNEL_INLINE void tile_span(const typename D::Row (&rows)[OB], int64_t c_begin, int64_t c_end,
                                const float* x, int64_t xs, typename V::reg (&acc)[OB][R]) {
  const float* xr[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) xr[r] = x + r * xs;
  for (int64_t c0 = c_begin; c0 < c_end; c0 += D::kGroup) {
    const int64_t g = c0 / D::kGroup, len = std::min<int64_t>(D::kGroup, c_end - c0);
    if constexpr (R == 1 && requires { D::kPrefetch; }) {  // decode: row streams
      constexpr int64_t kGB = D::kGroupBytes;
      if (kGB >= 64 || (g % (64 / kGB)) == 0) {
#pragma GCC unroll 8
        for (int b = 0; b < OB; ++b)
#pragma GCC unroll 4
          for (int64_t off = 0; off < kGB; off += 64)
            _mm_prefetch(reinterpret_cast<const char*>(rows[b].p + g * kGB + off + kPrefetchBytes),
                         _MM_HINT_T0);
      }
    }
    bool nan = false;
    if constexpr (D::kNanCheck) {
#pragma GCC unroll 8
      for (int b = 0; b < OB; ++b) nan |= D::has_nan(rows[b], c0, len);
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
}

template <class V, class D>
DF_KERNEL_INLINE float finish(typename V::reg acc) {
  if constexpr (permuted<D>())
    return V::reduce(D::unpermute(acc));
  else
    return V::reduce(acc);
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
  tile_span<V, D, OB, R>(rows, 0, cols, x, xs, acc);
#pragma GCC unroll 8
  for (int b = 0; b < OB; ++b)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) y[r * ys + b] = finish<V, D>(acc[b][r]);
}

// One span of one row tile whose 16-lane accumulators live in memory: lanes
// of (b, r) at st + (b * kMaxR + r) * 16.
template <class V, class D, int OB, int R>
void tile_span_saved(const typename D::Row (&rows)[OB], int64_t c_begin, int64_t c_end,
                     const float* x, int64_t xs, float* st) {
  typename V::reg acc[OB][R];
#pragma GCC unroll 8
  for (int b = 0; b < OB; ++b)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[b][r] = V::load(st + (b * V::kMaxR + r) * 16);
  tile_span<V, D, OB, R>(rows, c_begin, c_end, x, xs, acc);
#pragma GCC unroll 8
  for (int b = 0; b < OB; ++b)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) V::store(st + (b * V::kMaxR + r) * 16, acc[b][r]);
}

// Columns per span when many activation rows share the weight rows: every
// row's span of x stays in L2 (<= 512 KiB in all) while all row tiles use it.
// A multiple of every decoder's group.
inline int64_t col_block(int64_t n_rows) {
  const int64_t fit = (int64_t{512} << 10) / (4 * n_rows) / 128 * 128;
  return std::clamp<int64_t>(fit, 128, 1024);
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
  static_assert(kMaxR >= 1 && kMaxR <= 4);
  if constexpr (OB > V::kOB) {  // decode-only tile shape
    for (int64_t r = 0; r < n_rows; ++r) tile<V, D, OB, 1>(rows, cols, x + r * xs, xs, y + r * ys, ys);
    return;
  }
  if (n_rows <= kMaxR) {
    if (n_rows == kMaxR) tile<V, D, OB, kMaxR>(rows, cols, x, xs, y, ys);
    if constexpr (kMaxR > 1) if (n_rows == 1) tile<V, D, OB, 1>(rows, cols, x, xs, y, ys);
    if constexpr (kMaxR > 2) if (n_rows == 2) tile<V, D, OB, 2>(rows, cols, x, xs, y, ys);
    if constexpr (kMaxR > 3) if (n_rows == 3) tile<V, D, OB, 3>(rows, cols, x, xs, y, ys);
    return;
  }
  // Many rows: spans of kColBlock columns, accumulators saved between spans.
  const int64_t n_tiles = (n_rows + kMaxR - 1) / kMaxR, block = col_block(n_rows);
  AlignedArray<float> state(static_cast<size_t>(n_tiles * OB * kMaxR * 16));
  state.zero();
  for (int64_t c0 = 0; c0 < cols; c0 += block) {
    const int64_t c1 = std::min(cols, c0 + block);
    for (int64_t t = 0; t < n_tiles; ++t) {
      const int64_t r0 = t * kMaxR, nr = std::min<int64_t>(kMaxR, n_rows - r0);
      float* st = state.data() + t * OB * kMaxR * 16;
      const float* xt = x + r0 * xs;
      if (nr == kMaxR) tile_span_saved<V, D, OB, kMaxR>(rows, c0, c1, xt, xs, st);
      if constexpr (kMaxR > 1) if (nr == 1) tile_span_saved<V, D, OB, 1>(rows, c0, c1, xt, xs, st);
      if constexpr (kMaxR > 2) if (nr == 2) tile_span_saved<V, D, OB, 2>(rows, c0, c1, xt, xs, st);
      if constexpr (kMaxR > 3) if (nr == 3) tile_span_saved<V, D, OB, 3>(rows, c0, c1, xt, xs, st);
    }
  }
  for (int64_t r = 0; r < n_rows; ++r)
    for (int b = 0; b < OB; ++b)
      y[r * ys + b] =
          finish<V, D>(V::load(state.data() + ((r / kMaxR) * OB * kMaxR + b * kMaxR + r % kMaxR) * 16));
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
  // Staged scales of a tile's rows: on the stack unless the rows are very
  // wide (model code calls this per head and per row, so no malloc there).
  alignas(64) float stage_small[2048];
  AlignedArray<float> stage_big;
  float* stage = stage_small;
  if (kOBDecode * stage_per_row > 2048) {
    stage_big = AlignedArray<float>(static_cast<size_t>(kOBDecode * stage_per_row));
    stage = stage_big.data();
  }
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
    for (int b = 0; b < OB; ++b) rows[b] = D::row(w, o + b, stage + b * stage_per_row);
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
