#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/error.h"

namespace deltafin::tokenizer {

namespace {
pcre2_code* code_of(void* p) { return static_cast<pcre2_code*>(p); }
}  // namespace

namespace {
// Unicode White_Space, what \s means in Oniguruma (tokenizers) and Rust's
// regex (tiktoken). PCRE2's \s also takes U+180E, which is not White_Space.
constexpr const char* kWhiteSpace =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Spells \s and \S out as White_Space classes (\S inside a class is kept).
std::string expand_whitespace(std::string_view p) {
  std::string out;
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      if (n == 's') out += class_depth ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      else if (n == 'S' && !class_depth) out += "[^" + std::string(kWhiteSpace) + "]";
      else { out += c; out += n; }
      ++i;
      continue;
    }
    if (c == '[') ++class_depth;
    else if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}
}  // namespace

Regex::Regex(std::string_view pattern, std::string_view what) : pattern_(expand_whitespace(pattern)) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: split pattern not supported by PCRE2 at offset {} ({}): {}", what, off,
         reinterpret_cast<const char*>(msg), pattern_);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(code_of(code_)); }

namespace {
// Per-thread match context with a JIT stack that can grow to 256 MiB (the
// default 32 KiB overflows on long runs of letters or spaces, which the
// look-aheads of the split patterns walk one character at a time).
struct MatchContext {
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchContext() {
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, nullptr);
    DF_CHECK(ctx && stack);
    pcre2_jit_stack_assign(ctx, nullptr, stack);
    pcre2_set_heap_limit(ctx, 4u * 1024 * 1024);  // KiB: 4 GiB for the interpreter fallback
  }
  ~MatchContext() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(ctx);
  }
};
pcre2_match_context* match_context() {
  thread_local MatchContext mc;
  return mc.ctx;
}
}  // namespace

void Regex::for_each_match(std::string_view text,
                           const std::function<void(size_t, size_t)>& fn) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_of(code_), nullptr);
  DF_CHECK(md != nullptr);
  pcre2_match_context* ctx = match_context();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text was validated once by the caller; skip PCRE2's per-call check.
    int rc = pcre2_match(code_of(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("split pattern failed on a text piece of {} bytes ({}); split the input into smaller parts",
           text.size(), reinterpret_cast<const char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      fn(b, e);
      pos = e;
    } else {
      // Empty match: move on by one UTF-8 character.
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  pcre2_match_data_free(md);
}

std::string rewrite_class_intersections(std::string_view p) {
  std::string out;
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (p[i] == '[') {
      // Find the end of this class, noting a top-level "&&[^".
      size_t j = i + 1, amp = std::string_view::npos;
      int depth = 1;
      while (j < p.size() && depth > 0) {
        if (p[j] == '\\') { j += 2; continue; }
        if (p[j] == '[') ++depth;
        else if (p[j] == ']') --depth;
        else if (depth == 1 && p.compare(j, 4, "&&[^") == 0) amp = j;
        if (depth > 0) ++j;
      }
      if (amp != std::string_view::npos && j < p.size()) {
        std::string_view a = p.substr(i + 1, amp - (i + 1));
        std::string_view b = p.substr(amp + 4, j - 1 - (amp + 4));  // inside [^ ... ]
        out += "(?:(?![" + std::string(b) + "])[" + std::string(a) + "])";
        i = j + 1;
        continue;
      }
    }
    out.push_back(p[i]);
    ++i;
  }
  return out;
}

}  // namespace deltafin::tokenizer
