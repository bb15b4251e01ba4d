// A compiled PCRE2 pattern (UTF + Unicode properties, JIT where available)
// for the split patterns of tokenizer.json and tiktoken.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace deltafin::tokenizer {

class Regex {
 public:
  // Compiles `pattern` (PCRE2 syntax, as Oniguruma/fancy-regex patterns
  // of tokenizer files are written). Throws Error naming `what` and the
  // offset of the first unsupported construct.
  Regex(std::string_view pattern, std::string_view what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls fn(begin, end) for each non-overlapping, non-empty match in `text`
  // from left to right (byte offsets). REQUIRES: text is valid UTF-8.
  void for_each_match(std::string_view text,
                      const std::function<void(size_t, size_t)>& fn) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Rewrites fancy-regex class intersections of the form `[A&&[^B]]` (Kimi's
// tiktoken pattern) into PCRE2's `(?:(?![B])[A])`. Other patterns are
// returned unchanged.
std::string rewrite_class_intersections(std::string_view pattern);

}  // namespace deltafin::tokenizer
