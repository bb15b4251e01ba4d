// The chat-template interpreter: walks the syntax tree of jinja_parse.cc.
#include <cmath>
#include <unordered_map>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"
#include "util/error.h"

namespace deltafin::jinja {

namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;
  const Value* find(const std::string& k) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(k);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

// Python's % and // on integers (result takes the divisor's sign).
int64_t py_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

class Interp {
 public:
  explicit Interp(Scope& root) : root_(root) {}
  int line = 0;

  enum class Flow { Normal, Break, Continue };

  Flow exec(const std::vector<Node>& nodes, Scope& sc, std::string& out) {
    for (const Node& n : nodes) {
      line = n.line;
      switch (n.kind) {
        case Node::Kind::Text: out += n.text; break;
        case Node::Kind::Output: out += eval(*n.expr, sc).to_string(); break;
        case Node::Kind::If:
          for (const auto& [cond, body] : n.branches) {
            if (!cond || eval(*cond, sc).truthy()) {
              Flow f = exec(body, sc, out);
              if (f != Flow::Normal) return f;
              break;
            }
          }
          break;
        case Node::Kind::For: exec_for(n, sc, out); break;
        case Node::Kind::Set: {
          Value v = eval(*n.expr, sc);
          if (n.attr_set) {
            const Value* ns = sc.find(n.targets[0]);
            if (!ns || !ns->is_namespace())
              fail("{{% set {}.{} %}} needs '{}' to be a namespace()", n.targets[0], n.targets[1], n.targets[0]);
            ns->dict().set(n.targets[1], std::move(v));
          } else {
            assign(n.targets, v, sc);
          }
          break;
        }
        case Node::Kind::SetBlock: {
          std::string s;
          exec(n.body, sc, s);
          assign(n.targets, Value(std::move(s)), sc);
          break;
        }
        case Node::Kind::Macro: sc.vars[n.macro_name] = make_macro(n); break;
        case Node::Kind::Break: return Flow::Break;
        case Node::Kind::Continue: return Flow::Continue;
      }
    }
    return Flow::Normal;
  }

  Value eval(const Expr& e, Scope& sc) {
    line = e.line;
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = sc.find(e.name);
        return v ? *v : Value();
      }
      case Expr::Kind::Attr: return get_attr(eval(*e.a, sc), e.name);
      case Expr::Kind::Index: {
        Value obj = eval(*e.a, sc);
        return get_item(obj, eval(*e.b, sc));
      }
      case Expr::Kind::Slice: {
        Value obj = eval(*e.a, sc);
        Value a = e.b ? eval(*e.b, sc) : Value::none();
        Value b = e.c ? eval(*e.c, sc) : Value::none();
        Value c = e.d ? eval(*e.d, sc) : Value::none();
        return slice(obj, a, b, c);
      }
      case Expr::Kind::Call: return eval_call(e, sc);
      case Expr::Kind::Filter: {
        Value v = eval(*e.a, sc);
        List args;
        Kwargs kw;
        eval_args(e, sc, args, kw);
        line = e.line;
        return apply_filter(e.name, v, args, kw);
      }
      case Expr::Kind::Test: {
        Value v = eval(*e.a, sc);
        List args;
        Kwargs kw;
        eval_args(e, sc, args, kw);
        line = e.line;
        return Value(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.a, sc);
        if (e.name == "not") return Value(!v.truthy());
        if (!v.is_number()) fail("unary {} needs a number, not {}", e.name, v.type_name());
        if (e.name == "+") return v;
        return v.is_int() ? Value(-v.as_int()) : Value(-v.as_float());
      }
      case Expr::Kind::Binary: return eval_binary(e, sc);
      case Expr::Kind::Cond:
        if (eval(*e.b, sc).truthy()) return eval(*e.a, sc);
        return e.c ? eval(*e.c, sc) : Value();
      case Expr::Kind::ListLit:
      case Expr::Kind::TupleLit: {
        List l;
        for (const auto& a : e.args) l.push_back(eval(*a, sc));
        return Value(std::move(l));
      }
      case Expr::Kind::DictLit: {
        Dict d;
        for (size_t i = 0; i < e.args.size(); ++i) {
          Value k = eval(*e.args[i], sc);
          if (!k.is_string()) fail("dict literal keys must be strings here, not {}", k.type_name());
          d.set(k.str(), eval(*e.args2[i], sc));
        }
        return Value(std::move(d));
      }
    }
    return Value();
  }

 private:
  void assign(const std::vector<std::string>& targets, const Value& v, Scope& sc) {
    if (targets.size() == 1) {
      sc.vars[targets[0]] = v;
      return;
    }
    List items = iterate(v);
    if (items.size() != targets.size())
      fail("cannot unpack {} values into {} names", items.size(), targets.size());
    for (size_t i = 0; i < targets.size(); ++i) sc.vars[targets[i]] = items[i];
  }

  void eval_args(const Expr& e, Scope& sc, List& args, Kwargs& kw) {
    for (const auto& a : e.args) args.push_back(eval(*a, sc));
    for (const auto& [k, v] : e.kwargs) kw.emplace_back(k, eval(*v, sc));
  }

  Value eval_call(const Expr& e, Scope& sc) {
    List args;
    Kwargs kw;
    if (e.a->kind == Expr::Kind::Attr) {
      Value obj = eval(*e.a->a, sc);
      eval_args(e, sc, args, kw);
      line = e.line;
      if (auto r = call_method(obj, e.a->name, args, kw)) return *r;
      Value f = get_attr(obj, e.a->name);
      if (!f.is_function()) fail("{} has no method '{}'", obj.type_name(), e.a->name);
      return f.fn()(args, kw);
    }
    Value f = eval(*e.a, sc);
    eval_args(e, sc, args, kw);
    line = e.line;
    if (!f.is_function()) {
      if (e.a->kind == Expr::Kind::Name && f.is_undefined())
        fail("'{}' is undefined (not a known function, or a macro called before its definition)", e.a->name);
      fail("a {} value is not callable", f.type_name());
    }
    return f.fn()(args, kw);
  }

  Value eval_binary(const Expr& e, Scope& sc) {
    const std::string& op = e.name;
    Value a = eval(*e.a, sc);
    if (op == "and") return a.truthy() ? eval(*e.b, sc) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.b, sc);
    Value b = eval(*e.b, sc);
    line = e.line;
    if (op == "==") return Value(equal(a, b));
    if (op == "!=") return Value(!equal(a, b));
    if (op == "<") return Value(less(a, b));
    if (op == ">") return Value(less(b, a));
    if (op == "<=") return Value(!less(b, a));
    if (op == ">=") return Value(!less(a, b));
    if (op == "in" || op == "not in") {
      bool r;
      if (b.is_string()) {
        if (!a.is_string()) fail("'in <string>' needs a string on the left, not {}", a.type_name());
        r = b.str().find(a.str()) != std::string::npos;
      } else if (b.is_list()) {
        r = false;
        for (const auto& x : b.list()) if (equal(x, a)) { r = true; break; }
      } else if (b.is_dict()) {
        r = a.is_string() && b.dict().find(a.str()) != nullptr;
      } else if (b.is_undefined()) {
        fail("'in' on an undefined value");
      } else {
        fail("'in' needs a string, list or dict on the right, not {}", b.type_name());
      }
      return Value(op == "in" ? r : !r);
    }
    if (op == "~") return Value(a.to_string() + b.to_string());
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
      if (a.is_list() && b.is_list()) {
        List l = a.list();
        l.insert(l.end(), b.list().begin(), b.list().end());
        return Value(std::move(l));
      }
    }
    if (op == "*") {
      if ((a.is_string() || a.is_list()) && b.is_int()) std::swap(a, b);
      if (a.is_int() && b.is_string()) {
        std::string s;
        for (int64_t i = 0; i < a.as_int(); ++i) s += b.str();
        return Value(std::move(s));
      }
      if (a.is_int() && b.is_list()) {
        List l;
        for (int64_t i = 0; i < a.as_int(); ++i) l.insert(l.end(), b.list().begin(), b.list().end());
        return Value(std::move(l));
      }
    }
    bool na = a.is_number() || a.is_bool(), nb = b.is_number() || b.is_bool();
    if (!na || !nb) {
      if (op == "%" && a.is_string()) fail("string formatting with % is not supported; use ~ or format()");
      fail("unsupported operand types for {}: {} and {}", op, a.type_name(), b.type_name());
    }
    bool ints = !a.is_float() && !b.is_float();
    if (op == "/") {
      if (b.as_float() == 0) fail("division by zero");
      return Value(a.as_float() / b.as_float());
    }
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "//" || op == "%") {
        if (y == 0) fail("integer division or modulo by zero");
        return Value(op == "%" ? py_mod(x, y) : py_floordiv(x, y));
      }
      if (op == "**") {
        if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t r = 1;
        for (int64_t i = 0; i < y; ++i) r *= x;
        return Value(r);
      }
    } else {
      double x = a.as_float(), y = b.as_float();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "//") return Value(std::floor(x / y));
      if (op == "%") return Value(x - y * std::floor(x / y));
      if (op == "**") return Value(std::pow(x, y));
    }
    fail("unsupported operator {}", op);
  }

  void exec_for(const Node& n, Scope& sc, std::string& out) {
    List all = iterate(eval(*n.expr, sc));
    List items;
    if (n.filter) {
      Scope fs;
      fs.parent = &sc;
      for (auto& it : all) {
        assign(n.targets, it, fs);
        if (eval(*n.filter, fs).truthy()) items.push_back(it);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      Scope es;
      es.parent = &sc;
      exec(n.else_body, es, out);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      Scope ls;
      ls.parent = &sc;
      assign(n.targets, items[i], ls);
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(len - i));
      loop.set("revindex0", Value(len - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == len - 1));
      loop.set("length", Value(len));
      loop.set("depth", Value(int64_t{1}));
      loop.set("depth0", Value(int64_t{0}));
      loop.set("previtem", i > 0 ? items[i - 1] : Value());
      loop.set("nextitem", i + 1 < len ? items[i + 1] : Value());
      loop.set("cycle", Value(Function([i](List& args, Kwargs&) {
        if (args.empty()) fail("loop.cycle() needs at least one value");
        return args[static_cast<size_t>(i) % args.size()];
      })));
      ls.vars["loop"] = Value(std::move(loop));
      Flow f = exec(n.body, ls, out);
      if (f == Flow::Break) break;
    }
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value(Function([this, node](List& args, Kwargs& kw) -> Value {
      Scope ms;
      ms.parent = &root_;
      if (args.size() > node->params.size())
        fail("macro {} takes {} arguments, got {}", node->macro_name, node->params.size(), args.size());
      for (size_t i = 0; i < node->params.size(); ++i) {
        const auto& [pname, def] = node->params[i];
        if (i < args.size()) { ms.vars[pname] = args[i]; continue; }
        bool found = false;
        for (auto& [k, v] : kw) if (k == pname) { ms.vars[pname] = v; found = true; }
        if (!found) ms.vars[pname] = def ? eval(*def, ms) : Value();
      }
      int saved = line;
      std::string out;
      exec(node->body, ms, out);
      line = saved;
      return Value(std::move(out));
    }));
  }

  Scope& root_;
};

}  // namespace

Template::Template(std::string_view source, std::string name)
    : name_(std::move(name)), body_(std::make_unique<std::vector<Node>>(parse_template(source, name_))) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Dict& globals) const {
  Scope root;
  Dict builtins;
  add_globals(builtins);
  for (auto& [k, v] : builtins.items) root.vars[k] = v;
  for (const auto& [k, v] : globals.items) root.vars[k] = v;
  Interp in(root);
  std::string out;
  try {
    in.exec(*body_, root, out);
  } catch (const Error& e) {
    fail("{} line {}: {}", name_, in.line, e.what());
  }
  return out;
}

}  // namespace deltafin::jinja
