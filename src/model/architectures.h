// One builder per architecture (one file each); model.cc dispatches on
// config.json's model_type.
#pragma once

#include <memory>

#include "model/decoder.h"

namespace deltafin {

std::unique_ptr<DecoderModel> build_deepseek_v3(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_qwen3_moe(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_mixtral(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_kimi_linear(const Checkpoint& ck, const ModelOptions& opts);
std::unique_ptr<DecoderModel> build_kimi_k3(const Checkpoint& ck, const ModelOptions& opts);

}  // namespace deltafin
