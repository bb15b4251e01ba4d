// The scalar reference: decode each weight row exactly to fp32, then the
// canonical dot product with every activation row (the row is decoded once
// and reused by all n_rows activation rows).
#include "kernels/kernels_internal.h"
#include "util/aligned.h"

namespace deltafin::kernels::detail {

void matmul_rows_scalar(const WeightView& w, int64_t o_begin, int64_t o_end, const float* x,
                        int64_t n_rows, int64_t x_stride, float* y, int64_t y_stride) {
  const EncodingTraits& t = traits(w.enc);
  AlignedArray<float> row(static_cast<size_t>(w.cols));
  for (int64_t o = o_begin; o < o_end; ++o) {
    t.decode_row(w, o, row.data());  // F32 too: data may be unaligned
    const float* wr = row.data();
    for (int64_t r = 0; r < n_rows; ++r)
      y[r * y_stride + o] = dot_canonical(wr, x + r * x_stride, w.cols);
  }
}

}  // namespace deltafin::kernels::detail
