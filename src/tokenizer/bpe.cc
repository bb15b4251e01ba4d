#include "tokenizer/bpe.h"

#include <queue>

namespace deltafin::tokenizer {

void BpeMerges::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  auto [it, inserted] = pairs_.emplace(key(left, right), Merge{rank, merged});
  if (!inserted && rank < it->second.rank) it->second = Merge{rank, merged};
}

void BpeMerges::merge_reference(std::vector<int32_t>& s) const {
  while (s.size() > 1) {
    const Merge* best = nullptr;
    size_t at = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const Merge* m = find(s[i], s[i + 1]);
      if (m && (!best || m->rank < best->rank)) { best = m; at = i; }
    }
    if (!best) break;
    s[at] = best->merged;
    s.erase(s.begin() + static_cast<ptrdiff_t>(at) + 1);
  }
}

void BpeMerges::merge(std::vector<int32_t>& s) const {
  const size_t n = s.size();
  if (n < 2) return;
  if (n <= 24) {  // short pieces: the quadratic loop is faster than a heap
    merge_reference(s);
    return;
  }
  // Doubly linked list over positions; a heap of candidate merges ordered by
  // (rank, left position), validated when popped.
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Cand {
    int32_t rank, pos, right, left_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    int32_t j = next[i];
    if (const Merge* m = find(s[i], s[j])) heap.push(Cand{m->rank, i, j, s[i], s[j]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] != c.right || s[c.pos] != c.left_id || s[c.right] != c.right_id)
      continue;
    s[c.pos] = find(c.left_id, c.right_id)->merged;
    alive[c.right] = false;
    next[c.pos] = next[c.right];
    if (next[c.pos] >= 0) prev[next[c.pos]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) s[w++] = s[i];
  s.resize(w);
}

}  // namespace deltafin::tokenizer
