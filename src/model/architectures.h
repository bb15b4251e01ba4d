// One builder per architecture (one file each); model.cc dispatches on
// config.json's model_type.
#pragma once

#include <memory>

#include "format/checkpoint.h"
#include "model/decoder.h"

namespace deltafin {

std::unique_ptr<DecoderModel> build_deepseek_v3(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_qwen3_moe(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_mixtral(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_kimi_linear(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_kimi_k3(const Checkpoint& ck, const ModelOptions& opts);

// One tensor of a published checkpoint, without its data.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes() const {
    uint64_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

// Every text-model tensor Kimi K3 publishes for this config.json (top level,
// model_type kimi_k3): "language_model." names, published dtypes and shapes,
// routed experts as MXFP4 weight_packed + weight_scale, vision tensors left
// out. What a K3-shaped synthetic checkpoint holds, and what inspect can
// count from a config alone. Throws Error on a config the builder refuses.
std::vector<TensorSpec> kimi_k3_tensors(const ModelConfig& config);

// A ModelSummary from the tensor plan alone (no weights needed).
ModelSummary summarize_plan(const ModelConfig& config);

// The same for the other architectures (model/tensor_plans.cc): names, dtypes
// and shapes as their makers publish them, mirroring the builders; routed
// experts (and, for fp8, every linear but embeddings, lm_head and routers) in
// the encoding the config's quantization_config names. Throws Error on a
// config the builder would refuse.
std::vector<TensorSpec> deepseek_v3_tensors(const ModelConfig& config);
std::vector<TensorSpec> qwen3_moe_tensors(const ModelConfig& config);
std::vector<TensorSpec> mixtral_tensors(const ModelConfig& config);
std::vector<TensorSpec> kimi_linear_tensors(const ModelConfig& config);
// Dispatches on config.json's model_type (kimi_k3 included).
std::vector<TensorSpec> published_tensors(const ModelConfig& config);

}  // namespace deltafin
