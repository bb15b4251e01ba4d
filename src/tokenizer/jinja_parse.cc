// Parser of the chat-template Jinja subset: tokens to the syntax tree.
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"
#include "util/error.h"

namespace deltafin::jinja {

namespace {

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
  Parser p(lex_template(source, name), name);
  return p.run();
}

}  // namespace deltafin::jinja
