#include "model/model.h"

#include "format/checkpoint.h"
#include "model/architectures.h"
#include "util/error.h"

namespace deltafin {

namespace {

struct ArchEntry {
  const char* model_type;
  std::unique_ptr<DecoderModel> (*build)(const Checkpoint&, const ModelOptions&);
};

constexpr ArchEntry kArchitectures[] = {
    {"deepseek_v3", build_deepseek_v3}, {"kimi_k2", build_deepseek_v3}, {"qwen3_moe", build_qwen3_moe},
    {"mixtral", build_mixtral},         {"kimi_linear", build_kimi_linear},
    {"kimi_k3", build_kimi_k3},
};

}  // namespace

std::vector<std::string> known_architectures() {
  std::vector<std::string> v;
  for (const auto& a : kArchitectures) v.push_back(a.model_type);
  return v;
}

std::unique_ptr<Model> load_model(const Checkpoint& ck, const ModelOptions& opts) {
  const std::string type = ck.config().str({"model_type"}, "");
  for (const auto& a : kArchitectures)
    if (type == a.model_type) {
      auto m = a.build(ck, opts);
      m->pilot = opts.pilot && opts.experts != nullptr;
      m->context_limit = opts.max_context;
      return m;
    }
  std::string known;
  for (const auto& n : known_architectures()) known += (known.empty() ? "" : ", ") + n;
  fail("{}: model_type '{}' is not supported (deltafin runs: {})", ck.config().label(), type, known);
}

}  // namespace deltafin
