// CPU kernels over weights in their published encodings (design contract 1),
// with one fixed reduction order (contract 2).
//
// THE CANONICAL DOT PRODUCT. Every output element of every product of a
// weight row w (decoded exactly as below) with an fp32 activation row x of
// length n is computed as:
//
//   acc[0..15] = +0.0f
//   for i in 0 .. n-1:  acc[i % 16] = fmaf(w_i, x_i, acc[i % 16])
//   s8[l] = acc[l] + acc[l + 8]   (l < 8)
//   s4[l] = s8[l] + s8[l + 4]     (l < 4)
//   s2[l] = s4[l] + s4[l + 2]     (l < 2)
//   result = s2[0] + s2[1]
//
// whatever the ISA (scalar, AVX2, AVX-512), the number of activation rows in
// flight, or the number of threads. So scalar, AVX2 and AVX-512 results are
// bit-identical, and a SIMD kernel is tested against the scalar one with ==.
//
// Exact weight decode w_i (fp32), one row per encoding of the table below:
//   F32      w = the float
//   BF16     w = bits << 16
//   FP8      w = fp32(e4m3(q)) * scale_inv[r/128][c/128]   (one fp32 rounding;
//            the NaN codes 0x7f / 0xff decode to the quiet NaN of their sign)
//   INT4     w = (nibble - 8) * bf16 scale[r][c/32]        (exact)
//   MXFP4    w = e2m1(nibble) * 2^(e8m0 scale[r][c/32] - 127)  (exact)
// (../shared/specs/weight-formats.md gives the bit layouts.)
#pragma once

#include <cstdint>
#include <string_view>

namespace deltafin {
class ThreadPool;
}

namespace deltafin::kernels {

enum class Encoding : uint8_t { F32 = 0, BF16, FP8_B128, INT4_G32, MXFP4_G32 };
constexpr int kNumEncodings = 5;

enum class Isa : uint8_t { Scalar = 0, Avx2, Avx512 };
constexpr int kNumIsas = 3;

// One weight matrix [rows = output features, cols = input features] in its
// published encoding. A view: owns nothing (the bytes live in an mmap'd
// checkpoint or an expert-store record).
struct WeightView {
  Encoding enc = Encoding::F32;
  int64_t rows = 0, cols = 0;
  // Row r starts at data + r * row_bytes(enc, cols).
  //   F32: fp32 [rows, cols]; BF16: bf16 [rows, cols]; FP8: e4m3 [rows, cols];
  //   INT4: int32 [rows, cols/8] (element j of an int32 in bits 4j..4j+3);
  //   MXFP4: uint8 [rows, cols/2] (element 2c low nibble, 2c+1 high nibble).
  const uint8_t* data = nullptr;
  // Scales (nullptr for F32/BF16):
  //   FP8:   fp32 [ceil(R/128), scale_stride], R = rows of the whole tensor;
  //          row r of this view uses scale row (scale_row0 + r) / 128.
  //   INT4:  bf16 [rows, cols/32]; MXFP4: e8m0 uint8 [rows, cols/32]
  //          (row r of this view at scales + r * (cols/32) * element size).
  const uint8_t* scales = nullptr;
  int64_t scale_stride = 0;  // FP8 only: floats per scale row = ceil(cols/128)
  int64_t scale_row0 = 0;    // FP8 only

  // The rows [r0, r0 + n) of this matrix as a view of their own.
  // REQUIRES: 0 <= r0, r0 + n <= rows.
  WeightView row_slice(int64_t r0, int64_t n) const;
};

// One row of the encoding table (ggml's type_traits, for our formats).
struct EncodingTraits {
  const char* name;     // "bf16", "fp8-e4m3-b128", ...
  int group;            // cols must be a multiple of this (1 for F32/BF16/FP8)
  // Bytes of one row of `cols` elements in `data` (scales excluded).
  int64_t (*row_bytes)(int64_t cols);
  // Decodes row r of w into out[0..cols) exactly as in the header comment.
  void (*decode_row)(const WeightView& w, int64_t r, float* out);
};

const EncodingTraits& traits(Encoding e);
std::string_view encoding_name(Encoding e);

// The fastest ISA this CPU supports (cpuid), unless forced.
Isa active_isa();
// For tests and benchmarks: use `isa` from now on (must be supported).
void force_isa(Isa isa);
bool isa_supported(Isa isa);
std::string_view isa_name(Isa isa);

// Y[r, o] = dot(W[o, :], X[r, :]) for r < n_rows and every o < w.rows, in the
// canonical order. X is fp32 with row stride x_stride (floats), Y likewise.
// Threads of `pool` (if any) split the output features o, never a dot.
// REQUIRES: x_stride >= w.cols, y_stride >= w.rows, w.cols % group == 0.
void matmul(const WeightView& w, const float* x, int64_t n_rows, int64_t x_stride,
            float* y, int64_t y_stride, ThreadPool* pool = nullptr);

// The same product for output features [o_begin, o_end) only, on the calling
// thread, with the given ISA. matmul() is built from this.
void matmul_rows(Isa isa, const WeightView& w, int64_t o_begin, int64_t o_end,
                 const float* x, int64_t n_rows, int64_t x_stride, float* y,
                 int64_t y_stride);

// The canonical dot product of two fp32 vectors (attention scores, norms).
float dot(const float* a, const float* b, int64_t n);

// y[i] = fmaf(a, x[i], y[i]) for i < n. Element by element (one rounding
// each), so every ISA gives the same bits as the scalar loop: the model's
// weighted sums (attention outputs, KDA state updates, router-order sums)
// use it instead of std::fma, which is a library call in code compiled for
// the baseline ISA.
void axpy(float a, const float* x, float* y, int64_t n);

}  // namespace deltafin::kernels
