// A Hugging Face model directory opened as it is: config.json,
// generation_config.json, and model.safetensors or shards listed in
// model.safetensors.index.json, all memory-mapped. Tensors are looked up by
// their published names; linear weights come back as kernel WeightViews in
// their published encoding (contract 1: nothing is re-encoded).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "kernels/kernels.h"

namespace deltafin {

// config.json with typed look-ups. Keys can be given with their aliases
// (e.g. {"num_experts", "num_local_experts"}); the first present wins.
class ModelConfig {
 public:
  ModelConfig() = default;
  ModelConfig(nlohmann::json j, std::string label) : j_(std::move(j)), label_(std::move(label)) {}

  const nlohmann::json& json() const { return j_; }
  bool has(std::initializer_list<const char*> keys) const;
  // Throws Error naming the key and the file when absent or of the wrong type.
  int64_t i64(std::initializer_list<const char*> keys) const;
  int64_t i64(std::initializer_list<const char*> keys, int64_t dflt) const;
  double f64(std::initializer_list<const char*> keys) const;
  double f64(std::initializer_list<const char*> keys, double dflt) const;
  bool boolean(std::initializer_list<const char*> keys, bool dflt) const;
  std::string str(std::initializer_list<const char*> keys, const std::string& dflt) const;
  // A nested object (e.g. "rope_scaling"), or null when absent.
  const nlohmann::json* object(const char* key) const;
  const std::string& label() const { return label_; }

 private:
  const nlohmann::json* find(std::initializer_list<const char*> keys) const;
  nlohmann::json j_;
  std::string label_;
};

class Checkpoint {
 public:
  // Opens a model directory. Throws Error naming the missing or bad file.
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  // The top-level config.json.
  const ModelConfig& config() const { return config_; }
  // generation_config.json, or an empty object when the file is absent.
  const nlohmann::json& generation_config() const { return generation_config_; }

  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  // Throws Error naming the tensor when absent, or when its shape differs
  // from `shape` (if given).
  const TensorView& require(const std::string& name,
                            const std::vector<int64_t>& shape = {}) const;

  // The linear layer `prefix` ("model.layers.3.mlp.experts.7.up_proj") as a
  // WeightView [out, in], its encoding read from the tensors present:
  //   prefix.weight BF16 / F32                      -> BF16 / F32
  //   prefix.weight F8_E4M3 + .weight_scale_inv F32 -> FP8 128x128 blocks
  //   prefix.weight_packed I32 + .weight_scale BF16 -> INT4 group 32
  //   prefix.weight_packed U8  + .weight_scale U8   -> MXFP4 group 32
  // Throws Error naming the tensor on a missing tensor or a wrong shape/dtype.
  kernels::WeightView linear(const std::string& prefix, int64_t out, int64_t in) const;
  // True when prefix names a linear layer in any encoding.
  bool has_linear(const std::string& prefix) const;

  // A 1-D (or any-shape) tensor of `n` elements converted to fp32
  // (F32, BF16, F16 or F64 sources), e.g. norm weights and biases.
  std::vector<float> floats(const std::string& name, int64_t n) const;

  // Every tensor of every shard, by name.
  const std::map<std::string, const TensorView*>& all_tensors() const { return index_; }

 private:
  std::filesystem::path dir_;
  ModelConfig config_;
  nlohmann::json generation_config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// Looks a tensor up by name (nullptr when absent).
using TensorLookup = std::function<const TensorView*(const std::string& name)>;

// The linear layer `prefix` as a WeightView, its encoding read from the
// tensors `find` gives (see Checkpoint::linear). `out`/`in` < 0: taken from
// the tensors' shapes instead of checked against them. `where` names the
// container in errors (a checkpoint directory, a store record).
kernels::WeightView linear_weight(const TensorLookup& find, const std::string& prefix, int64_t out, int64_t in,
                                  const std::string& where);

// Reads and parses a JSON file; throws Error naming the file.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace deltafin
