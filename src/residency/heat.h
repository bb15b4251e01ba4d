// The expert heat histogram: how often each (layer, expert) was routed to,
// kept next to the store (heat.json) and updated by every run, so the next
// run pins the hottest experts in RAM.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace deltafin::residency {

class HeatHistogram {
 public:
  HeatHistogram() = default;
  HeatHistogram(int layers, int experts);

  int layers() const { return layers_; }
  int experts() const { return experts_; }
  void add(int layer, int expert, uint64_t n = 1);
  uint64_t count(int layer, int expert) const;
  uint64_t total() const;
  // The n hottest (layer, expert) pairs with a non-zero count, hottest first
  // (ties: lower layer, then lower expert).
  std::vector<std::pair<int, int>> hottest(size_t n) const;

  // Loads `path`; a missing file gives an empty histogram. Throws Error when
  // the file is malformed or was written for another shape.
  static HeatHistogram load(const std::string& path, int layers, int experts);
  // Writes atomically (temporary file + rename).
  void save(const std::string& path) const;

 private:
  int layers_ = 0, experts_ = 0;
  std::vector<uint64_t> counts_;  // [layers, experts]
};

}  // namespace deltafin::residency
