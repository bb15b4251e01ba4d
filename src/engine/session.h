// One sequence being run through a model: chunked prefill, then decode steps,
// with the timings the tool reports (contract 4: measured, never estimated).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"

namespace deltafin {

struct SessionStats {
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_tok_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
};

class Session {
 public:
  // prefill_chunk: rows per forward block during prefill (>= 1).
  Session(Model& model, int64_t prefill_chunk);

  // Runs `tokens` in blocks of prefill_chunk rows. Writes every row's logits
  // to all_logits ([tokens, vocab]) when non-null, and the last row's to
  // `last` when non-null.
  void prefill(std::span<const int32_t> tokens, float* all_logits, std::vector<float>* last);
  // One decode step: appends `token`, writes its logits [vocab] to `logits`.
  void decode(int32_t token, std::vector<float>& logits);

  int64_t length() const { return seq_->length(); }
  const SessionStats& stats() const { return stats_; }

 private:
  Model& model_;
  int64_t chunk_;
  std::unique_ptr<SequenceState> seq_;
  SessionStats stats_;
  std::vector<float> block_logits_;
};

}  // namespace deltafin
