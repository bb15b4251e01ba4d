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
  std::unique_ptr<SequenceState> snapshot() const override {
    auto s = std::make_unique<DecoderState>();
    for (const auto& l : layers) s->layers.push_back(l->snapshot());
    s->len = len;
    return s;
  }
  void restore(const SequenceState& saved) override {
    const auto* s = dynamic_cast<const DecoderState*>(&saved);
    DF_CHECK(s && s->layers.size() == layers.size() && s->len <= len);
    for (size_t l = 0; l < layers.size(); ++l) layers[l]->restore(*s->layers[l]);
    len = s->len;
  }
};

}  // namespace

std::unique_ptr<SequenceState> DecoderModel::new_sequence() const {
  auto s = std::make_unique<DecoderState>();
  for (const auto& l : layers) s->layers.push_back(l.attn->new_state(context_limit));
  return s;
}

uint64_t DecoderModel::sequence_bytes(int64_t tokens) const {
  uint64_t b = 0;
  for (const auto& l : layers) b += l.attn->state_bytes(tokens);
  return b;
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
  if (context_limit > 0 && pos0 + n > context_limit)
    fail("the sequence would reach {} tokens, past the context limit of {} (--ctx-size); raise --ctx-size, "
         "whose KV cache the RAM budget holds", pos0 + n, context_limit);
  if (attn_res_block > 0) run_layers_attn_res(st.layers, n, pos0);
  else for (size_t l = 0; l < layers.size(); ++l) {
    DecoderLayer& L = layers[l];
    L.in_norm.run(x_.data(), n, xn_.data());
    L.attn->forward(*st.layers[l], xn_.data(), n, pos0, a_.data(), pool);
    for (int64_t i = 0; i < n * H; ++i) x_[i] += a_[i];
    pilot_hint(l, x_.data(), n);
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

void DecoderModel::run_layers_attn_res(std::vector<std::unique_ptr<LayerState>>& states, int64_t n,
                                       int64_t pos0) {
  const int64_t H = info.hidden, L = static_cast<int64_t>(layers.size());
  const int64_t max_blocks = (L + attn_res_block - 1) / attn_res_block;
  mix_.resize(n * H);
  blocks_.resize(max_blocks * n * H);  // [block, row, hidden]
  res_scratch_.resize(H + max_blocks + 1);
  std::vector<const float*> v(max_blocks + 1);
  int64_t nb = 0;
  // mix_ = AttnRes over [blocks..., P] row by row.
  auto mix = [&](const AttnResWeights& w, const float* P) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < nb; ++i) v[i] = blocks_.data() + (i * n + r) * H;
      v[nb] = P + r * H;
      attn_res(v.data(), nb + 1, w.w.data(), w.eps, H, mix_.data() + r * H, res_scratch_.data());
    }
  };
  // x_ holds the prefix sum P (h between layers).
  for (int64_t l = 0; l < L; ++l) {
    DecoderLayer& D = layers[l];
    const float* xa = x_.data();
    if (nb > 0) {
      mix(*D.attn_res, x_.data());
      xa = mix_.data();
    }
    const bool block_start = l % attn_res_block == 0;
    if (block_start) std::copy_n(x_.data(), n * H, blocks_.data() + nb++ * n * H);
    D.in_norm.run(xa, n, xn_.data());
    D.attn->forward(*states[l], xn_.data(), n, pos0, a_.data(), pool);
    if (block_start) std::copy_n(a_.data(), n * H, x_.data());  // the prefix restarts
    else for (int64_t i = 0; i < n * H; ++i) x_[i] += a_[i];
    pilot_hint(static_cast<size_t>(l), x_.data(), n);
    mix(*D.mlp_res, x_.data());
    D.post_norm.run(mix_.data(), n, xn_.data());
    if (D.moe) D.moe->run(xn_.data(), n, a_.data(), *experts, pool);
    else D.mlp->run(xn_.data(), n, a_.data(), pool, scratch_);
    for (int64_t i = 0; i < n * H; ++i) x_[i] += a_[i];
  }
  mix(*output_res, x_.data());
  std::copy_n(mix_.data(), n * H, x_.data());
}

void DecoderModel::pilot_hint(size_t l, const float* h, int64_t n) {
  if (!pilot || l + 1 >= layers.size() || !layers[l + 1].moe) return;
  DecoderLayer& next = layers[l + 1];
  const int64_t H = info.hidden, K = next.moe->router.top_k;
  pilot_x_.resize(n * H);
  pilot_ids_.resize(n * K);
  pilot_w_.resize(n * K);
  next.post_norm.run(h, n, pilot_x_.data());
  next.moe->router.route(pilot_x_.data(), n, pilot_ids_.data(), pilot_w_.data(), pool, pilot_scratch_);
  // The picks, most likely first: by how many rows chose each expert, then
  // by the best rank a row gave it (a single row: the router's own order).
  const int64_t E = next.moe->router.n_experts;
  pilot_votes_.assign(E, 0);
  pilot_rank_.assign(E, K);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = pilot_ids_[r * K + k];
      ++pilot_votes_[e];
      pilot_rank_[e] = std::min<int64_t>(pilot_rank_[e], k);
    }
  std::vector<int32_t>& uni = pilot_uni_;
  uni.clear();
  for (int32_t e = 0; e < E; ++e)
    if (pilot_votes_[e] > 0) uni.push_back(e);
  std::sort(uni.begin(), uni.end(), [&](int32_t a, int32_t b) {
    if (pilot_votes_[a] != pilot_votes_[b]) return pilot_votes_[a] > pilot_votes_[b];
    if (pilot_rank_[a] != pilot_rank_[b]) return pilot_rank_[a] < pilot_rank_[b];
    return a < b;
  });
  experts->prefetch_hint(static_cast<int>(l + 1), uni);
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
