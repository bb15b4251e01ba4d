#include "model/decoder.h"

#include <algorithm>

#include "format/checkpoint.h"
#include "util/error.h"

namespace deltafin {

namespace {

struct DecoderState : SequenceState {
  std::vector<std::unique_ptr<LayerState>> layers;
  int64_t len = 0;
  int64_t length() const override { return len; }
};

}  // namespace

std::unique_ptr<SequenceState> DecoderModel::new_sequence() const {
  auto s = std::make_unique<DecoderState>();
  for (const auto& l : layers) s->layers.push_back(l.attn->new_state());
  return s;
}

void DecoderModel::forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits, bool last_only) {
  auto& st = static_cast<DecoderState&>(seq);
  const int64_t n = static_cast<int64_t>(tokens.size()), H = info.hidden;
  if (n == 0) return;
  x_.resize(n * H);
  xn_.resize(n * H);
  a_.resize(n * H);
  const auto& enc = kernels::traits(embed.enc);
  for (int64_t r = 0; r < n; ++r) {
    if (tokens[r] < 0 || tokens[r] >= info.vocab)
      fail("token id {} is outside the vocabulary (0 .. {})", tokens[r], info.vocab - 1);
    enc.decode_row(embed, tokens[r], x_.data() + r * H);
  }
  const int64_t pos0 = st.len;
  for (size_t l = 0; l < layers.size(); ++l) {
    DecoderLayer& L = layers[l];
    L.in_norm.run(x_.data(), n, xn_.data());
    L.attn->forward(*st.layers[l], xn_.data(), n, pos0, a_.data(), pool);
    for (int64_t i = 0; i < n * H; ++i) x_[i] += a_[i];
    L.post_norm.run(x_.data(), n, xn_.data());
    if (L.moe) L.moe->run(xn_.data(), n, a_.data(), *experts, pool);
    else L.mlp->run(xn_.data(), n, a_.data(), pool, scratch_);
    for (int64_t i = 0; i < n * H; ++i) x_[i] += a_[i];
  }
  st.len += n;
  const int64_t first = last_only ? n - 1 : 0;
  final_norm.run(x_.data() + first * H, n - first, xn_.data());
  lm_head.run(xn_.data(), n - first, logits, pool);
}

void DecoderModel::count_bytes(const Checkpoint& ck, const std::string& expert_marker) {
  for (const auto& [name, t] : ck.all_tensors()) {
    bool expert = name.find(expert_marker) != std::string::npos;
    uint64_t params = static_cast<uint64_t>(t->numel());
    // Packed encodings hold several parameters per element.
    if (name.ends_with(".weight_packed")) params *= (t->dtype == DType::I32 ? 8 : 2);
    if (name.ends_with("_scale") || name.ends_with("_scale_inv") || name.ends_with(".weight_shape")) params = 0;
    (expert ? info.expert_bytes : info.spine_bytes) += t->bytes;
    (expert ? info.expert_params : info.spine_params) += params;
  }
  const uint64_t n_experts = static_cast<uint64_t>(info.moe_layers * info.experts_per_layer);
  info.bytes_per_expert = n_experts ? info.expert_bytes / n_experts : 0;
}

}  // namespace deltafin
