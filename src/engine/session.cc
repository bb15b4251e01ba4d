#include "engine/session.h"

#include <algorithm>

#include "util/error.h"
#include "util/timer.h"

namespace deltafin {

Session::Session(Model& model, int64_t prefill_chunk)
    : model_(model), chunk_(std::max<int64_t>(prefill_chunk, 1)), seq_(model.new_sequence()) {}

void Session::prefill(std::span<const int32_t> tokens, float* all_logits, std::vector<float>* last) {
  const int64_t n = static_cast<int64_t>(tokens.size()), V = model_.vocab();
  if (n == 0) fail("the prompt is empty; give at least one token");
  Stopwatch sw;
  for (int64_t b = 0; b < n; b += chunk_) {
    const int64_t m = std::min(chunk_, n - b);
    const bool is_last = b + m == n;
    float* out;
    if (all_logits) {
      out = all_logits + b * V;
    } else {
      block_logits_.resize(V);
      out = block_logits_.data();
    }
    model_.forward(*seq_, tokens.subspan(b, m), out, /*last_only=*/all_logits == nullptr);
    if (is_last && last) {
      const float* row = all_logits ? out + (m - 1) * V : out;
      last->assign(row, row + V);
    }
  }
  stats_.prefill_seconds += sw.seconds();
  stats_.prefill_tokens += n;
}

void Session::decode(int32_t token, std::vector<float>& logits) {
  Stopwatch sw;
  logits.resize(model_.vocab());
  model_.forward(*seq_, std::span<const int32_t>(&token, 1), logits.data(), true);
  stats_.decode_seconds += sw.seconds();
  stats_.decode_tokens += 1;
}

}  // namespace deltafin
