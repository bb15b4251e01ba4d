// `deltafin synth`: writes a random-weight checkpoint in the published
// layout of an architecture (config.json, safetensors shards of at most
// --shard-size with model.safetensors.index.json, generation_config.json),
// so that models far larger than RAM can be tested and benchmarked without
// downloads. Seeded (same options, same bytes) and generated at disk speed.
//
// Values are random but valid and tame, so activations stay finite:
//   BF16/F32 linears   uniform, std 1/sqrt(in); embeddings std 1; lm_head
//                      std 2.5/sqrt(hidden); routers std 2/sqrt(hidden);
//                      norms 1 +- 0.1; e_score_correction_bias std 0.01;
//                      A_log = log U(0.5, 4); dt_bias, conv weights std 0.5
//   FP8 e4m3           codes with exponent field 5..8 (|q| in [0.25, 3.75]:
//                      never the NaN codes), scale_inv ~ 1/(1.69 sqrt(in))
//   INT4               any nibble; bf16 group scales ~ 1/(4.64 sqrt(in))
//   MXFP4              any nibble; E8M0 scales in two adjacent exponents
//                      around 1/(2.93 sqrt(in))
// (1.69, 4.64, 2.93: the rms of the codes drawn, so weights get std ~1/sqrt(in).)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace deltafin {

struct SynthOptions {
  std::string arch;     // deepseek_v3 | qwen3_moe | mixtral | kimi_linear | kimi_k3
  std::string out_dir;  // created; must not already hold a checkpoint
  // Shape overrides; 0 keeps the architecture's default (synth_config()).
  int64_t layers = 0, experts = 0, top_k = 0, hidden = 0, moe_inter = 0, inter = 0, heads = 0, vocab = 0;
  int64_t latent = 0;        // kimi_k3: routed_expert_hidden_size (the experts' input width)
  std::string encoding;      // bf16 | fp8 | int4 | mxfp4 of the routed experts; "" = as published
  double size_gb = 0;        // > 0: the most layers whose checkpoint fits in this many GB (1e9 bytes)
  uint64_t seed = 1;
  // Any config key, set last: dotted path ("text_config.q_lora_rank") -> JSON value.
  std::vector<std::pair<std::string, nlohmann::json>> set;
  uint64_t shard_bytes = 4ull << 30;  // largest shard file (header included)
  bool progress = true;               // a status line a second on stderr
};

struct SynthResult {
  nlohmann::json config;
  int64_t layers = 0;
  uint64_t tensors = 0, bytes = 0, shards = 0;
  double seconds = 0;
};

// The architectures synth writes.
std::vector<std::string> synth_architectures();

// config.json for `o` with `layers` layers: the published model's config
// with fewer layers (and experts), the shape overrides, the encoding's
// quantization_config and `o.set` applied. Throws Error on a bad option.
nlohmann::json synth_config(const SynthOptions& o, int64_t layers);

// The routed experts' encoding: o.encoding, or the architecture's published one.
std::string synth_encoding(const SynthOptions& o);

// The layer count synth will use: o.layers, the default, or for size_gb the
// most layers whose tensors fit in size_gb (Error when not even the fewest do).
int64_t synth_layers(const SynthOptions& o);

// Tensor bytes of the checkpoint synth_config(o, layers) describes.
uint64_t synth_bytes(const SynthOptions& o, int64_t layers);

// Writes the checkpoint. Throws Error naming the problem (bad option, output
// directory not empty, not enough free space, write failure).
SynthResult synth_checkpoint(const SynthOptions& o);

}  // namespace deltafin
