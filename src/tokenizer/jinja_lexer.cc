// Lexer of the chat-template Jinja subset.
#include <cctype>

#include "tokenizer/jinja_lexer.h"
#include "util/error.h"

namespace deltafin::jinja {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// transformers renders with trim_blocks and lstrip_blocks, and Jinja drops
// one trailing newline; done on the source text as @huggingface/jinja does.
std::string preprocess(std::string_view src) {
  std::string s(src);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  // lstrip_blocks: spaces/tabs from a line start up to "{%" or "{#".
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    bool line_start = i == 0 || s[i - 1] == '\n' || s[i - 1] == '\r';
    if (line_start) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j > i && j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '%' || s[j + 1] == '#' || s[j + 1] == '-')) i = j;
    }
    out.push_back(s[i]);
    ++i;
  }
  // trim_blocks: the newline right after "%}" or "#}" (also "-}").
  std::string out2;
  out2.reserve(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    out2.push_back(out[k]);
    if (out[k] == '}' && k > 0 && (out[k - 1] == '%' || out[k - 1] == '#' || out[k - 1] == '-') &&
        k + 1 < out.size() && out[k + 1] == '\n')
      ++k;
  }
  return out2;
}

class Lexer {
 public:
  Lexer(std::string_view src, const std::string& name) : s_(preprocess(src)), name_(name) {}

  std::vector<Item> run() {
    std::vector<Item> items;
    bool strip_next = false;
    while (pos_ < s_.size()) {
      size_t open = find_open(pos_);
      std::string text = s_.substr(pos_, open - pos_);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_ws(text[k])) ++k;
        text.erase(0, k);
        strip_next = false;
      }
      int text_line = line_;
      count_lines(pos_, open);
      pos_ = open;
      bool strip_prev = false;
      if (pos_ < s_.size()) strip_prev = s_[pos_ + 2] == '-';
      if (strip_prev) while (!text.empty() && is_ws(text.back())) text.pop_back();
      if (!text.empty()) items.push_back(Item{false, false, std::move(text), {}, text_line});
      if (pos_ >= s_.size()) break;
      char kind = s_[pos_ + 1];
      int tag_line = line_;
      pos_ += 2;
      if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) ++pos_;
      if (kind == '#') {
        size_t end = s_.find("#}", pos_);
        if (end == std::string::npos) error(tag_line, "comment {# is never closed with #}");
        strip_next = end > pos_ && s_[end - 1] == '-';
        count_lines(pos_, end + 2);
        pos_ = end + 2;
        continue;
      }
      Item it;
      it.tag = true;
      it.output = kind == '{';
      it.line = tag_line;
      strip_next = lex_tag(it, kind);
      if (!it.output && !it.toks.empty() && it.toks[0].t == Token::T::Name && it.toks[0].text == "raw") {
        // {% raw %}...{% endraw %}: the text in between is literal.
        size_t end = s_.find("endraw", pos_);
        size_t open2 = end == std::string::npos ? end : s_.rfind("{%", end);
        size_t close = end == std::string::npos ? end : s_.find("%}", end);
        if (open2 == std::string::npos || close == std::string::npos) error(tag_line, "{% raw %} without {% endraw %}");
        std::string raw = s_.substr(pos_, open2 - pos_);
        if (s_[open2 + 2] == '-') while (!raw.empty() && is_ws(raw.back())) raw.pop_back();
        count_lines(pos_, close + 2);
        strip_next = s_[close - 1] == '-';
        pos_ = close + 2;
        if (!raw.empty()) items.push_back(Item{false, false, std::move(raw), {}, tag_line});
        continue;
      }
      items.push_back(std::move(it));
    }
    return items;
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }
  void count_lines(size_t a, size_t b) {
    for (size_t i = a; i < b && i < s_.size(); ++i) line_ += s_[i] == '\n';
  }
  [[noreturn]] void error(int line, const std::string& msg) const {
    fail("{} line {}: {}", name_, line, msg);
  }
  bool starts(std::string_view w) const { return s_.compare(pos_, w.size(), w) == 0; }

  // Lexes tokens up to the tag's end; returns whether the tag ends with "-".
  bool lex_tag(Item& it, char kind) {
    int depth = 0;
    int start_line = line_;
    while (true) {
      while (pos_ < s_.size() && is_ws(s_[pos_])) {
        line_ += s_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= s_.size()) error(start_line, kind == '{' ? "{{ is never closed with }}" : "{% is never closed with %}");
      if (kind == '%' && (starts("-%}") || starts("%}"))) {
        bool strip = s_[pos_] == '-';
        pos_ += strip ? 3 : 2;
        return strip;
      }
      if (kind == '{' && depth == 0 && (starts("-}}") || starts("}}"))) {
        bool strip = s_[pos_] == '-';
        pos_ += strip ? 3 : 2;
        return strip;
      }
      char c = s_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        it.toks.push_back({Token::T::Name, s_.substr(b, pos_ - b), {}, line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = pos_;
        while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        bool is_float = false;
        if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
          size_t k = pos_ + 1;
          if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
          if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
            is_float = true;
            pos_ = k;
            while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
          }
        }
        std::string num;
        for (size_t k = b; k < pos_; ++k) if (s_[k] != '_') num.push_back(s_[k]);
        Token t{is_float ? Token::T::Float : Token::T::Int, num, {}, line_};
        t.v = is_float ? Value(std::stod(num)) : Value(static_cast<int64_t>(std::stoll(num)));
        it.toks.push_back(std::move(t));
      } else if (c == '\'' || c == '"') {
        it.toks.push_back({Token::T::String, lex_string(c), {}, line_});
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (starts(t)) op = t;
        if (op.empty()) {
          if (std::string_view("+-*/%~|.,:()[]{}<>=").find(c) == std::string_view::npos)
            error(line_, fmt::format("unexpected character '{}' in a tag", c));
          op = std::string(1, c);
        }
        if (op == "{") ++depth;
        if (op == "}") --depth;
        pos_ += op.size();
        it.toks.push_back({Token::T::Op, op, {}, line_});
      }
    }
  }

  std::string lex_string(char q) {
    int start_line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) error(start_line, "string literal is never closed");
      char c = s_[pos_++];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ >= s_.size()) {
        out.push_back(c);
        continue;
      }
      char e = s_[pos_++];
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '0': out.push_back('\0'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case '\n': ++line_; break;  // line continuation
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > s_.size()) error(line_, "truncated \\x/\\u escape in a string literal");
          uint32_t cp = static_cast<uint32_t>(std::stoul(s_.substr(pos_, n), nullptr, 16));
          pos_ += n;
          // UTF-8 encode
          if (cp < 0x80) out.push_back(static_cast<char>(cp));
          else if (cp < 0x800) { out.push_back(static_cast<char>(0xC0 | (cp >> 6))); out.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
          else if (cp < 0x10000) { out.push_back(static_cast<char>(0xE0 | (cp >> 12))); out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F))); out.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
          else { out.push_back(static_cast<char>(0xF0 | (cp >> 18))); out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F))); out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F))); out.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
          break;
        }
        default: out.push_back('\\'); out.push_back(e);
      }
    }
    return out;
  }

  std::string s_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Item> lex_template(std::string_view source, const std::string& name) {
  Lexer lx(source, name);
  return lx.run();
}

}  // namespace deltafin::jinja
