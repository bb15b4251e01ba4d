#include "residency/heat.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "format/checkpoint.h"
#include "util/error.h"

namespace deltafin::residency {

HeatHistogram::HeatHistogram(int layers, int experts)
    : layers_(layers), experts_(experts), counts_(static_cast<size_t>(layers) * experts, 0) {}

void HeatHistogram::add(int layer, int expert, uint64_t n) {
  counts_.at(static_cast<size_t>(layer) * experts_ + expert) += n;
}

uint64_t HeatHistogram::count(int layer, int expert) const {
  return counts_.at(static_cast<size_t>(layer) * experts_ + expert);
}

uint64_t HeatHistogram::total() const { return std::accumulate(counts_.begin(), counts_.end(), uint64_t{0}); }

std::vector<std::pair<int, int>> HeatHistogram::hottest(size_t n) const {
  std::vector<size_t> idx;
  for (size_t i = 0; i < counts_.size(); ++i)
    if (counts_[i] > 0) idx.push_back(i);
  n = std::min(n, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](size_t a, size_t b) {
    return counts_[a] > counts_[b] || (counts_[a] == counts_[b] && a < b);
  });
  std::vector<std::pair<int, int>> out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(static_cast<int>(idx[i] / experts_), static_cast<int>(idx[i] % experts_));
  return out;
}

HeatHistogram HeatHistogram::load(const std::string& path, int layers, int experts) {
  HeatHistogram h(layers, experts);
  if (!std::filesystem::exists(path)) return h;
  nlohmann::json j = read_json_file(path);
  if (!j.is_object() || j.value("layers", -1) != layers || j.value("experts", -1) != experts ||
      !j.contains("counts") || !j["counts"].is_array() || j["counts"].size() != static_cast<size_t>(layers))
    fail("{} does not match this model's {} layers x {} experts; delete it to start a new histogram", path, layers,
         experts);
  for (int l = 0; l < layers; ++l) {
    const auto& row = j["counts"][l];
    if (!row.is_array() || row.size() != static_cast<size_t>(experts))
      fail("{}: row {} does not have {} counts; delete the file to start a new histogram", path, l, experts);
    for (int e = 0; e < experts; ++e) {
      if (!row[e].is_number_unsigned()) fail("{}: count [{}][{}] is not a non-negative integer", path, l, e);
      h.counts_[static_cast<size_t>(l) * experts + e] = row[e].get<uint64_t>();
    }
  }
  return h;
}

void HeatHistogram::save(const std::string& path) const {
  nlohmann::json j = {{"format", "deltafin-heat"}, {"version", 1}, {"layers", layers_}, {"experts", experts_}};
  nlohmann::json rows = nlohmann::json::array();
  for (int l = 0; l < layers_; ++l)
    rows.push_back(std::vector<uint64_t>(counts_.begin() + static_cast<size_t>(l) * experts_,
                                         counts_.begin() + static_cast<size_t>(l + 1) * experts_));
  j["counts"] = rows;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) fail("cannot write {}", tmp);
    out << j.dump() << "\n";
    if (!out) fail("error writing {}", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("cannot rename {} to {}: {}", tmp, path, ec.message());
}

}  // namespace deltafin::residency
