// Added tokens (special and not) of a tokenizer: found in the input before
// normalization and pre-tokenization, leftmost-longest, as Hugging Face
// tokenizers' AddedVocabulary does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;  // matched on normalized text instead of raw text
};

class AddedTokens {
 public:
  void add(AddedToken t);
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

  // A piece of the input: either plain text or one added token.
  struct Segment {
    size_t begin, end;  // bytes of the input covered
    int32_t id;         // -1: plain text
  };
  // Splits `text` on tokens with normalized == `normalized`; special tokens
  // are skipped when !parse_special.
  std::vector<Segment> split(std::string_view text, bool normalized, bool parse_special) const;
  bool has(bool normalized) const { return normalized ? has_normalized_ : has_raw_; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
    int32_t token = -1;  // index into tokens_ when a token ends here
  };
  // Longest token (index) starting at text[pos] in trie `root`, or -1; sets len.
  int32_t longest_at(int32_t root, std::string_view text, size_t pos, size_t& len) const;
  int32_t child(int32_t node, unsigned char c) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_{Node{}, Node{}};  // roots: 0 raw, 1 normalized
  bool first_byte_[2][256] = {};
  bool has_raw_ = false, has_normalized_ = false;
};

}  // namespace deltafin::tokenizer
