// Byte-pair merging over token ids, shared by tokenizer.json BPE models and
// tiktoken rank files: a table maps an adjacent pair (left id, right id) to
// its rank and the id of the merged token; a piece is merged lowest rank
// first, leftmost first among equal ranks (what both Hugging Face tokenizers
// and tiktoken do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace deltafin::tokenizer {

class BpeMerges {
 public:
  void reserve(size_t n) { pairs_.reserve(n); }
  // Adds a merge; when the same pair is added twice the lower rank wins.
  void add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  size_t size() const { return pairs_.size(); }

  // Merges `symbols` (token ids) in place until no adjacent pair has a merge.
  void merge(std::vector<int32_t>& symbols) const;

  // The plain O(n^2) loop, kept as the reference merge() is tested against.
  void merge_reference(std::vector<int32_t>& symbols) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* find(int32_t a, int32_t b) const {
    auto it = pairs_.find(key(a, b));
    return it == pairs_.end() ? nullptr : &it->second;
  }
  std::unordered_map<uint64_t, Merge> pairs_;
};

}  // namespace deltafin::tokenizer
