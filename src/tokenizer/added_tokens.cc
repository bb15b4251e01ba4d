#include "tokenizer/added_tokens.h"

#include "tokenizer/unicode.h"

#include <algorithm>
#include <cctype>
#include <climits>

namespace deltafin::tokenizer {

int32_t AddedTokens::child(int32_t node, unsigned char c) const {
  const auto& nx = nodes_[node].next;
  auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, INT32_MIN));
  return it != nx.end() && it->first == c ? it->second : -1;
}

void AddedTokens::add(AddedToken t) {
  if (t.content.empty()) return;
  int32_t root = t.normalized ? 1 : 0;
  (t.normalized ? has_normalized_ : has_raw_) = true;
  first_byte_[root][static_cast<unsigned char>(t.content[0])] = true;
  int32_t node = root;
  for (unsigned char c : t.content) {
    int32_t n = child(node, c);
    if (n < 0) {
      n = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(Node{});
      auto& nx = nodes_[node].next;
      nx.insert(std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, INT32_MIN)), {c, n});
    }
    node = n;
  }
  if (nodes_[node].token >= 0) {
    tokens_[nodes_[node].token] = std::move(t);  // same content again: the later entry wins
  } else {
    nodes_[node].token = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(std::move(t));
  }
}

int32_t AddedTokens::longest_at(int32_t root, std::string_view text, size_t pos, size_t& len) const {
  int32_t node = root, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      len = i + 1 - pos;
    }
  }
  return best;
}

namespace {
// What tokenizers checks around single_word tokens: an alphanumeric or '_'.
bool word_before(std::string_view s, size_t end) {
  if (end == 0) return false;
  size_t len;
  uint32_t c = code_point_before(s, end, len);
  return c == '_' || is_alphanumeric(c);
}
bool word_after(std::string_view s, size_t begin) {
  if (begin >= s.size()) return false;
  size_t len;
  uint32_t c = code_point_at(s, begin, len);
  return c == '_' || is_alphanumeric(c);
}
}  // namespace

std::vector<AddedTokens::Segment> AddedTokens::split(std::string_view text, bool normalized,
                                                     bool parse_special) const {
  std::vector<Segment> out;
  int32_t root = normalized ? 1 : 0;
  size_t plain_start = 0, pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[root][static_cast<unsigned char>(text[pos])]) { ++pos; continue; }
    size_t len = 0;
    int32_t k = longest_at(root, text, pos, len);
    if (k < 0) { ++pos; continue; }
    const AddedToken& t = tokens_[k];
    size_t b = pos, e = pos + len;
    bool ok = parse_special || !t.special;
    if (ok && t.single_word) {
      ok = !word_before(text, b) && !word_after(text, e);
    }
    if (!ok) { pos = e; continue; }
    size_t n;
    if (t.lstrip)
      while (b > plain_start && is_white_space(code_point_before(text, b, n))) b -= n;
    if (t.rstrip)
      while (e < text.size() && is_white_space(code_point_at(text, e, n))) e += n;
    if (b > plain_start) out.push_back({plain_start, b, -1});
    out.push_back({b, e, t.id});
    pos = plain_start = e;
  }
  if (plain_start < text.size()) out.push_back({plain_start, text.size(), -1});
  return out;
}

}  // namespace deltafin::tokenizer
