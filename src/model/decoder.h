// The decoder stack shared by every architecture: embeddings, layers of
// (RMSNorm -> attention -> residual, RMSNorm -> MLP or MoE -> residual),
// final norm and lm_head. Architecture files fill it from a checkpoint.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/layers.h"
#include "model/model.h"

namespace deltafin {

// Attention residuals (Kimi K3): the score vector w = norm.weight * proj.weight
// of one AttnRes site (see attn_res in ops.h).
struct AttnResWeights {
  std::vector<float> w;  // [hidden]
  float eps = 1e-5f;
};

struct DecoderLayer {
  Norm in_norm, post_norm;
  std::unique_ptr<AttentionLayer> attn;
  std::optional<DenseMlp> mlp;
  std::unique_ptr<MoeFfn> moe;
  std::optional<AttnResWeights> attn_res, mlp_res;  // with DecoderModel::attn_res_block
};

class DecoderModel : public Model {
 public:
  kernels::WeightView embed;  // [vocab, hidden]
  std::vector<DecoderLayer> layers;
  Norm final_norm;
  Linear lm_head;
  ModelSummary info;
  ThreadPool* pool = nullptr;
  ExpertSource* experts = nullptr;           // where routed experts come from
  std::unique_ptr<ResidentExperts> resident;  // the checkpoint's own experts
  bool pilot = false;                         // see ModelOptions::pilot
  int64_t context_limit = 0;                  // see ModelOptions::max_context
  // Attention residuals (Kimi K3), when > 0: the residual stream is cut into
  // blocks of this many layers; each sub-layer's input (and the final norm's)
  // is an AttnRes mix of the block starts and the running prefix sum:
  //   P = h; x = blocks ? mix(P, attn_res) : P
  //   if l % block == 0: blocks += P; P = 0
  //   P += attn(in_norm x); h = P + ffn(post_norm mix(P, mlp_res))
  //   logits = lm_head(final_norm mix(h, output_res))
  int64_t attn_res_block = 0;
  std::optional<AttnResWeights> output_res;

  std::unique_ptr<SequenceState> new_sequence() const override;
  void forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits, bool last_only) override;
  const ModelSummary& summary() const override { return info; }
  uint64_t sequence_bytes(int64_t tokens) const override;
  int64_t max_context() const override { return context_limit; }
  const std::vector<std::vector<ExpertWeights>>& checkpoint_experts() const override { return resident->table; }

  // Fills info's byte and parameter counts from the checkpoint (routed
  // experts = tensors whose names contain `expert_marker`).
  void count_bytes(const Checkpoint& ck, const std::string& expert_marker);

 private:
  // The pilot after layer l's attention: hints layer l+1's router picks for
  // hidden states h [n, hidden]. Changes no state the logits depend on.
  void pilot_hint(size_t l, const float* h, int64_t n);
  // The layer loop with attention residuals; leaves the mixed final h in x_.
  void run_layers_attn_res(std::vector<std::unique_ptr<LayerState>>& states, int64_t n, int64_t pos0);
  std::vector<float> pilot_x_, pilot_w_, pilot_scratch_;
  std::vector<int32_t> pilot_ids_, pilot_uni_;
  std::vector<int64_t> pilot_votes_, pilot_rank_;
  std::vector<float> x_, xn_, a_, scratch_, mix_, blocks_, res_scratch_;
};

}  // namespace deltafin
