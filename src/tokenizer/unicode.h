// UTF-8 helpers shared by the tokenizers and the chat-template interpreter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deltafin::tokenizer {

// Length in bytes of the well-formed UTF-8 character starting at s[i], or 0
// when the bytes there are not one (truncated, overlong, surrogate, > U+10FFFF).
size_t utf8_char_len(std::string_view s, size_t i);

// `s` with every ill-formed sequence replaced by U+FFFD, one per maximal
// ill-formed subpart (what Rust's String::from_utf8_lossy does).
std::string utf8_lossy(std::string_view s);

// True when `s` is well-formed UTF-8.
bool utf8_valid(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a character
// that more bytes could still complete (for streaming decoders).
size_t utf8_stable_prefix(std::string_view s);

// Unicode White_Space (Rust's char::is_whitespace).
bool is_white_space(uint32_t cp);
// Letters and numbers (Rust's char::is_alphanumeric).
bool is_alphanumeric(uint32_t cp);
// The code point starting at s[i] (U+FFFD for an ill-formed byte); sets len.
uint32_t code_point_at(std::string_view s, size_t i, size_t& len);
// The code point ending at s[end - 1]; sets len. REQUIRES: end > 0.
uint32_t code_point_before(std::string_view s, size_t end, size_t& len);

// Appends code point `cp` encoded as UTF-8.
void utf8_append(std::string& out, uint32_t cp);

// Number of code points in well-formed `s`.
size_t utf8_length(std::string_view s);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// Unicode normalization through utf8proc. REQUIRES: s is well-formed UTF-8.
std::string normalize(std::string_view s, NormalForm form);

// Unicode lower/upper case of every code point (utf8proc's simple mappings).
std::string to_lower(std::string_view s);
std::string to_upper(std::string_view s);

}  // namespace deltafin::tokenizer
