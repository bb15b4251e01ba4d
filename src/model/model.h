// The model layer: one forward pass over a block of rows (tokens), for every
// architecture. The model never touches files: its dense weights are views
// into the checkpoint's mapping, and it asks an ExpertSource for each routed
// expert (the residency layer implements streaming sources).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace deltafin {

class Checkpoint;
class ThreadPool;

// One routed expert's three matrices, in their published encoding.
struct ExpertWeights {
  kernels::WeightView gate;  // [inter, hidden]  (w1)
  kernels::WeightView up;    // [inter, hidden]  (w3)
  kernels::WeightView down;  // [hidden, inter]  (w2)
};

// Where routed experts come from. The MoE layer announces, per layer and
// block of rows, the union of experts it needs (ascending ids), then takes
// them one by one in the order the source hands them out (as their bytes
// arrive) and releases each when done. Outputs are still summed in router
// order (contract 2), so the hand-out order never changes a bit.
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // REQUIRES: experts ascending, unique, each < the layer's expert count.
  virtual void begin_layer(int layer, std::span<const int32_t> experts) = 0;
  // Returns the next expert of the announced set that is ready (blocking
  // until one is), with its weights; valid until release().
  virtual int32_t next(ExpertWeights* out) = 0;
  virtual void release(int32_t expert) = 0;
  // Optional hint (the pilot): experts that layer `layer` will probably need.
  // `experts`: the pilot's picks for `layer`, most likely first.
  virtual void prefetch_hint(int /*layer*/, std::span<const int32_t> /*experts*/) {}
};

// Per-sequence state: KV caches, linear-attention states. Architecture-owned.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  // Number of tokens this sequence has seen.
  virtual int64_t length() const = 0;
  // The point to roll back to before a block that may be rejected (draft
  // tokens): the length, KV caches' lengths, and copies of the recurrent
  // (KDA) and convolution states. Freed with the returned pointer.
  virtual std::unique_ptr<SequenceState> snapshot() const = 0;
  // Brings this sequence back to `saved`; forward() then continues bit for
  // bit as from that moment. Can be repeated.
  // REQUIRES: `saved` is a snapshot() of this sequence, which has only been
  // appended to (forward) since.
  virtual void restore(const SequenceState& saved) = 0;
};

struct ModelSummary {
  std::string arch;              // "deepseek_v3", ...
  int64_t vocab = 0, hidden = 0, layers = 0;
  int64_t moe_layers = 0, experts_per_layer = 0, experts_per_token = 0;
  uint64_t spine_bytes = 0;      // every tensor that is not a routed expert
  uint64_t expert_bytes = 0;     // all routed experts, as stored
  uint64_t bytes_per_expert = 0; // one expert's three matrices with scales
  uint64_t spine_params = 0, expert_params = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Appends tokens to `seq` (one block: prefill chunk, or a single decode
  // token) and writes logits for every row, [tokens.size(), vocab] fp32, to
  // `logits` (or only the last row's when last_only). The bits of each row's
  // logits do not depend on how a sequence was cut into blocks, the thread
  // count, or the expert source (contract 2).
  virtual void forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                       bool last_only = false) = 0;
  virtual const ModelSummary& summary() const = 0;
  int64_t vocab() const { return summary().vocab; }
  // Bytes of one sequence's state (KV caches, recurrent states) after
  // `tokens` positions: what a RAM budget charges for a context.
  virtual uint64_t sequence_bytes(int64_t tokens) const = 0;
  // The longest sequence forward() accepts (ModelOptions::max_context; 0:
  // unlimited).
  virtual int64_t max_context() const = 0;
  // The routed experts as they sit in the checkpoint, [layer][expert]
  // (empty for dense layers): what `deltafin pack` copies into a store.
  virtual const std::vector<std::vector<ExpertWeights>>& checkpoint_experts() const = 0;
};

// Where the model runs: threads, and the source of routed experts (nullptr:
// the experts are read from the checkpoint's own mapping).
struct ModelOptions {
  ThreadPool* pool = nullptr;
  ExpertSource* experts = nullptr;
  // The pilot: right after layer L's attention, run layer L+1's router on the
  // current hidden state and hand its picks to experts->prefetch_hint().
  bool pilot = false;
  // The longest sequence (tokens); 0: unlimited. When set, every sequence's
  // caches are allocated for it up front and forward() refuses to go past it.
  int64_t max_context = 0;
};

// Builds the model for the checkpoint's config.json model_type. Throws Error
// for an unknown architecture or a missing/mis-shaped tensor.
std::unique_ptr<Model> load_model(const Checkpoint& ck, const ModelOptions& opts);

// The architectures load_model knows, for messages and `inspect`.
std::vector<std::string> known_architectures();

}  // namespace deltafin
