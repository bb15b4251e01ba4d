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

struct DecoderLayer {
  Norm in_norm, post_norm;
  std::unique_ptr<AttentionLayer> attn;
  std::optional<DenseMlp> mlp;
  std::unique_ptr<MoeFfn> moe;
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

  std::unique_ptr<SequenceState> new_sequence() const override;
  void forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits, bool last_only) override;
  const ModelSummary& summary() const override { return info; }

  // Fills info's byte and parameter counts from the checkpoint (routed
  // experts = tensors whose names contain `expert_marker`).
  void count_bytes(const Checkpoint& ck, const std::string& expert_marker);

 private:
  std::vector<float> x_, xn_, a_, scratch_;
};

}  // namespace deltafin
