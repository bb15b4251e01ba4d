// Lexer and parser of the chat-template Jinja subset.
#include <cctype>

#include "tokenizer/jinja_ast.h"
#include "util/error.h"

namespace deltafin::jinja {

namespace {

struct Token {
  enum class T { Name, String, Int, Float, Op, End };
  T t;
  std::string text;  // name, operator, or decoded string
  Value v;
  int line;
};

// A text run or one {{ }} / {% %} tag with its tokens.
struct Item {
  bool tag = false;
  bool output = false;  // {{ }} rather than {% %}
  std::string text;
  std::vector<Token> toks;
  int line = 1;
};

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

// ---- expressions ----

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& t, size_t start, int line, const std::string& name)
      : t_(t), p_(start), line_(line), name_(name) {}

  size_t pos() const { return p_; }
  bool done() const { return p_ >= t_.size(); }
  [[noreturn]] void error(const std::string& msg) const {
    int line = p_ < t_.size() ? t_[p_].line : line_;
    fail("{} line {}: {}", name_, line, msg);
  }
  bool is_op(const char* op) const { return p_ < t_.size() && t_[p_].t == Token::T::Op && t_[p_].text == op; }
  bool is_name(const char* n) const { return p_ < t_.size() && t_[p_].t == Token::T::Name && t_[p_].text == n; }
  bool accept_op(const char* op) { if (is_op(op)) { ++p_; return true; } return false; }
  bool accept_name(const char* n) { if (is_name(n)) { ++p_; return true; } return false; }
  void expect_op(const char* op) {
    if (!accept_op(op)) error(fmt::format("expected '{}' but found {}", op, describe()));
  }
  std::string expect_name() {
    if (p_ >= t_.size() || t_[p_].t != Token::T::Name) error(fmt::format("expected a name but found {}", describe()));
    return t_[p_++].text;
  }
  std::string describe() const {
    if (p_ >= t_.size()) return "the end of the tag";
    return fmt::format("'{}'", t_[p_].text);
  }
  void expect_end() {
    if (!done()) error(fmt::format("unexpected {} (unsupported syntax)", describe()));
  }

  std::unique_ptr<Expr> make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = p_ < t_.size() ? t_[p_].line : line_;
    return e;
  }

  // expression with an optional conditional: a if b else c
  std::unique_ptr<Expr> expression() {
    auto e = parse_or();
    while (is_name("if")) {
      ++p_;
      auto c = make(Expr::Kind::Cond);
      c->b = parse_or();
      if (accept_name("else")) c->c = expression();
      c->a = std::move(e);
      e = std::move(c);
    }
    return e;
  }

  // An expression without the trailing "if ... else ..." (for-loop iterables).
  std::unique_ptr<Expr> expression_no_cond_hook() { return parse_or(); }

  // Comma-separated expressions; more than one (or a trailing comma) is a tuple.
  std::unique_ptr<Expr> tuple_or_expression() {
    auto first = expression();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::TupleLit);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (done()) break;
      t->args.push_back(expression());
    }
    return t;
  }

 private:
  std::unique_ptr<Expr> binary(std::string op, std::unique_ptr<Expr> a, std::unique_ptr<Expr> b) {
    auto e = make(Expr::Kind::Binary);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }
  std::unique_ptr<Expr> parse_or() {
    auto e = parse_and();
    while (accept_name("or")) e = binary("or", std::move(e), parse_and());
    return e;
  }
  std::unique_ptr<Expr> parse_and() {
    auto e = parse_not();
    while (accept_name("and")) e = binary("and", std::move(e), parse_not());
    return e;
  }
  std::unique_ptr<Expr> parse_not() {
    if (is_name("not")) {
      auto e = make(Expr::Kind::Unary);
      ++p_;
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  std::unique_ptr<Expr> parse_compare() {
    auto e = parse_math1();
    while (true) {
      std::string op;
      if (p_ < t_.size() && t_[p_].t == Token::T::Op &&
          (t_[p_].text == "==" || t_[p_].text == "!=" || t_[p_].text == "<" || t_[p_].text == ">" ||
           t_[p_].text == "<=" || t_[p_].text == ">=")) {
        op = t_[p_++].text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && p_ + 1 < t_.size() && t_[p_ + 1].t == Token::T::Name && t_[p_ + 1].text == "in") {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      e = binary(op, std::move(e), parse_math1());
    }
    return e;
  }
  std::unique_ptr<Expr> parse_math1() {
    auto e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = t_[p_++].text;
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }
  std::unique_ptr<Expr> parse_concat() {
    auto e = parse_math2();
    while (accept_op("~")) e = binary("~", std::move(e), parse_math2());
    return e;
  }
  std::unique_ptr<Expr> parse_math2() {
    auto e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = t_[p_++].text;
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }
  std::unique_ptr<Expr> parse_pow() {
    auto e = parse_unary(true);
    while (accept_op("**")) e = binary("**", std::move(e), parse_unary(true));
    return e;
  }
  std::unique_ptr<Expr> parse_unary(bool with_filter) {
    std::unique_ptr<Expr> e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::Unary);
      e->name = t_[p_++].text;
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }
  std::unique_ptr<Expr> parse_primary() {
    if (done()) error("expected an expression but the tag ends");
    const Token& tk = t_[p_];
    if (tk.t == Token::T::Name) {
      ++p_;
      auto e = make(Expr::Kind::Literal);
      if (tk.text == "true" || tk.text == "True") e->value = Value(true);
      else if (tk.text == "false" || tk.text == "False") e->value = Value(false);
      else if (tk.text == "none" || tk.text == "None") e->value = Value::none();
      else { e->kind = Expr::Kind::Name; e->name = tk.text; }
      return e;
    }
    if (tk.t == Token::T::String) {
      auto e = make(Expr::Kind::Literal);
      std::string s;
      while (p_ < t_.size() && t_[p_].t == Token::T::String) s += t_[p_++].text;  // adjacent literals
      e->value = Value(std::move(s));
      return e;
    }
    if (tk.t == Token::T::Int || tk.t == Token::T::Float) {
      auto e = make(Expr::Kind::Literal);
      e->value = tk.v;
      ++p_;
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(Expr::Kind::TupleLit);
      auto e = tuple_or_expression();
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto e = make(Expr::Kind::ListLit);
      while (!is_op("]")) {
        e->args.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return e;
    }
    if (accept_op("{")) {
      auto e = make(Expr::Kind::DictLit);
      while (!is_op("}")) {
        e->args.push_back(expression());
        expect_op(":");
        e->args2.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return e;
    }
    error(fmt::format("unexpected {} where an expression should start", describe()));
  }
  void parse_call_args(Expr& call) {
    // after "("
    while (!is_op(")")) {
      if (p_ + 1 < t_.size() && t_[p_].t == Token::T::Name && t_[p_ + 1].t == Token::T::Op && t_[p_ + 1].text == "=") {
        std::string k = t_[p_].text;
        p_ += 2;
        call.kwargs.emplace_back(k, expression());
      } else {
        if (is_op("*")) error("*args in calls is not supported");
        call.args.push_back(expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }
  std::unique_ptr<Expr> parse_postfix(std::unique_ptr<Expr> e) {
    while (true) {
      if (accept_op(".")) {
        auto a = make(Expr::Kind::Attr);
        if (p_ < t_.size() && t_[p_].t == Token::T::Int) {  // a.0 is a[0]
          a->kind = Expr::Kind::Index;
          auto lit = make(Expr::Kind::Literal);
          lit->value = t_[p_++].v;
          a->b = std::move(lit);
        } else {
          a->name = expect_name();
        }
        a->a = std::move(e);
        e = std::move(a);
      } else if (accept_op("[")) {
        std::unique_ptr<Expr> parts[3];
        int n = 0;
        bool slice = false;
        while (true) {
          if (!is_op(":") && !is_op("]")) parts[n] = expression();
          if (accept_op(":")) {
            slice = true;
            if (++n > 2) error("a slice takes at most start:stop:step");
            continue;
          }
          break;
        }
        expect_op("]");
        auto x = make(slice ? Expr::Kind::Slice : Expr::Kind::Index);
        x->a = std::move(e);
        x->b = std::move(parts[0]);
        x->c = std::move(parts[1]);
        x->d = std::move(parts[2]);
        if (!slice && !x->b) error("empty subscript []");
        e = std::move(x);
      } else if (accept_op("(")) {
        auto c = make(Expr::Kind::Call);
        c->a = std::move(e);
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  std::unique_ptr<Expr> parse_filter_expr(std::unique_ptr<Expr> e) {
    while (true) {
      if (accept_op("|")) {
        auto f = make(Expr::Kind::Filter);
        f->name = expect_name();
        while (accept_op(".")) f->name += "." + expect_name();
        if (!is_known_filter(f->name)) error(fmt::format("unsupported filter '{}'", f->name));
        f->a = std::move(e);
        if (accept_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        auto t = make(Expr::Kind::Test);
        t->negated = accept_name("not");
        if (p_ < t_.size() && t_[p_].t == Token::T::Name) t->name = t_[p_++].text;
        else if (p_ < t_.size() && t_[p_].t == Token::T::Op && (t_[p_].text == "==" || t_[p_].text == "!=" ||
                 t_[p_].text == "<" || t_[p_].text == ">" || t_[p_].text == "<=" || t_[p_].text == ">="))
          t->name = t_[p_++].text;
        else error(fmt::format("expected a test name after 'is' but found {}", describe()));
        if (!is_known_test(t->name)) error(fmt::format("unsupported test '{}'", t->name));
        t->a = std::move(e);
        if (accept_op("(")) {
          parse_call_args(*t);
        } else if (p_ < t_.size() && (t_[p_].t == Token::T::String || t_[p_].t == Token::T::Int ||
                                      t_[p_].t == Token::T::Float ||
                                      (t_[p_].t == Token::T::Name && t_[p_].text != "and" && t_[p_].text != "or" &&
                                       t_[p_].text != "else" && t_[p_].text != "if" && t_[p_].text != "in" &&
                                       t_[p_].text != "not" && t_[p_].text != "is"))) {
          t->args.push_back(parse_primary());  // `x is divisibleby 3`, `x is sameas none`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t p_;
  int line_;
  const std::string& name_;
};

// ---- statements ----

class Parser {
 public:
  Parser(std::vector<Item> items, const std::string& name) : items_(std::move(items)), name_(name) {}

  std::vector<Node> run() {
    std::string end;
    auto body = block({}, end);
    return body;
  }

 private:
  [[noreturn]] void error(int line, const std::string& msg) const { fail("{} line {}: {}", name_, line, msg); }

  static std::string keyword(const Item& it) {
    return !it.toks.empty() && it.toks[0].t == Token::T::Name ? it.toks[0].text : "";
  }

  // Parses nodes until a {% kw %} with kw in `stops` (returned in `found`).
  std::vector<Node> block(const std::vector<std::string>& stops, std::string& found) {
    std::vector<Node> out;
    while (i_ < items_.size()) {
      Item& it = items_[i_];
      if (!it.tag) {
        Node n;
        n.kind = Node::Kind::Text;
        n.line = it.line;
        n.text = std::move(it.text);
        out.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (it.output) {
        ExprParser ep(it.toks, 0, it.line, name_);
        Node n;
        n.kind = Node::Kind::Output;
        n.line = it.line;
        n.expr = ep.tuple_or_expression();
        ep.expect_end();
        out.push_back(std::move(n));
        ++i_;
        continue;
      }
      std::string kw = keyword(it);
      for (const auto& s : stops) {
        if (kw == s) {
          found = kw;
          return out;
        }
      }
      ++i_;
      statement(it, kw, out);
    }
    if (!stops.empty()) error(items_.empty() ? 1 : items_.back().line, fmt::format("missing {{% {} %}}", stops.back()));
    found.clear();
    return out;
  }

  void statement(Item& it, const std::string& kw, std::vector<Node>& out) {
    ExprParser ep(it.toks, 1, it.line, name_);
    Node n;
    n.line = it.line;
    if (kw == "if") {
      n.kind = Node::Kind::If;
      auto cond = ep.expression();
      ep.expect_end();
      while (true) {
        std::string found;
        auto body = block({"elif", "else", "endif"}, found);
        n.branches.emplace_back(std::move(cond), std::move(body));
        Item& stop = items_[i_++];
        ExprParser sp(stop.toks, 1, stop.line, name_);
        if (found == "endif") { sp.expect_end(); break; }
        if (found == "else") {
          sp.expect_end();
          std::string f2;
          auto else_body = block({"endif"}, f2);
          ExprParser ep2(items_[i_].toks, 1, items_[i_].line, name_);
          ep2.expect_end();
          ++i_;
          n.branches.emplace_back(nullptr, std::move(else_body));
          break;
        }
        cond = sp.expression();
        sp.expect_end();
      }
    } else if (kw == "for") {
      n.kind = Node::Kind::For;
      n.targets.push_back(ep.expect_name());
      while (ep.accept_op(",")) n.targets.push_back(ep.expect_name());
      if (!ep.accept_name("in")) ep.error("expected 'in' in a for loop");
      n.expr = ep.expression_no_cond_hook();
      if (ep.accept_name("if")) n.filter = ep.expression();
      if (ep.accept_name("recursive")) ep.error("recursive loops are not supported");
      ep.expect_end();
      std::string found;
      n.body = block({"else", "endfor"}, found);
      ++i_;
      if (found == "else") {
        std::string f2;
        n.else_body = block({"endfor"}, f2);
        ++i_;
      }
    } else if (kw == "set") {
      std::string first = ep.expect_name();
      n.targets.push_back(first);
      if (ep.accept_op(".")) {
        n.targets.push_back(ep.expect_name());
        n.attr_set = true;
      } else {
        while (ep.accept_op(",")) n.targets.push_back(ep.expect_name());
      }
      if (ep.accept_op("=")) {
        n.kind = Node::Kind::Set;
        n.expr = ep.tuple_or_expression();
        ep.expect_end();
      } else {
        n.kind = Node::Kind::SetBlock;
        if (ep.accept_op("|")) ep.error("filters on {% set %} blocks are not supported");
        ep.expect_end();
        std::string found;
        n.body = block({"endset"}, found);
        ++i_;
      }
    } else if (kw == "macro") {
      n.kind = Node::Kind::Macro;
      n.macro_name = ep.expect_name();
      ep.expect_op("(");
      while (!ep.is_op(")")) {
        std::string p = ep.expect_name();
        std::unique_ptr<Expr> def;
        if (ep.accept_op("=")) def = ep.expression();
        n.params.emplace_back(p, std::move(def));
        if (!ep.accept_op(",")) break;
      }
      ep.expect_op(")");
      ep.expect_end();
      std::string found;
      n.body = block({"endmacro"}, found);
      ++i_;
    } else if (kw == "break" || kw == "continue") {
      n.kind = kw == "break" ? Node::Kind::Break : Node::Kind::Continue;
      ep.expect_end();
    } else if (kw == "generation") {
      // transformers' assistant-mask marker: renders its body unchanged.
      ep.expect_end();
      std::string found;
      auto body = block({"endgeneration"}, found);
      ++i_;
      for (auto& b : body) out.push_back(std::move(b));
      return;
    } else if (kw.empty()) {
      error(it.line, "empty {% %} tag");
    } else if (kw == "endif" || kw == "endfor" || kw == "endset" || kw == "endmacro" || kw == "elif" || kw == "else") {
      error(it.line, fmt::format("{{% {} %}} without its opening tag", kw));
    } else {
      error(it.line, fmt::format("unsupported statement {{% {} %}} (supported: if, for, set, macro, break, continue, raw, generation)", kw));
    }
    out.push_back(std::move(n));
  }

  std::vector<Item> items_;
  const std::string& name_;
  size_t i_ = 0;
};

}  // namespace

std::vector<Node> parse_template(std::string_view source, const std::string& name) {
  Lexer lx(source, name);
  Parser p(lx.run(), name);
  return p.run();
}

}  // namespace deltafin::jinja
