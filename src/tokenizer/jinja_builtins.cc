#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "tokenizer/jinja_strings.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::jinja {

using namespace detail;

const Value* arg(const List& args, const Kwargs& kwargs, size_t pos, const char* name) {
  if (pos < args.size()) return &args[pos];
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

List iterate(const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    List l;
    for (const auto& [k, x] : v.dict().items) l.push_back(Value(k));
    return l;
  }
  if (v.is_string()) {
    List l;
    auto cps = code_points(v.str());
    for (size_t i = 0; i < cps.size(); ++i) l.push_back(Value(from_code_points(cps, i, i + 1)));
    return l;
  }
  if (v.is_undefined()) return {};  // Jinja's Undefined iterates as empty; None does not
  fail("a {} value is not iterable", v.type_name());
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    const Value* v = obj.dict().find(name);
    return v ? *v : Value();
  }
  return Value();
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (!key.is_string()) return Value();
    const Value* v = obj.dict().find(key.str());
    return v ? *v : Value();
  }
  if (obj.is_list() || obj.is_string()) {
    if (!key.is_int()) fail("{} indices must be integers, not {}", obj.type_name(), key.type_name());
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size()), i = key.as_int();
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.list()[static_cast<size_t>(i)] : Value();
    }
    auto cps = code_points(obj.str());
    int64_t n = static_cast<int64_t>(cps.size()), i = key.as_int();
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value(from_code_points(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1)) : Value();
  }
  return Value();
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  int64_t st = step.is_none() ? 1 : int_arg(&step, 1, "slice step");
  if (st == 0) fail("slice step cannot be zero");
  std::vector<uint32_t> cps;
  int64_t n;
  if (obj.is_list()) n = static_cast<int64_t>(obj.list().size());
  else if (obj.is_string()) { cps = code_points(obj.str()); n = static_cast<int64_t>(cps.size()); }
  else fail("cannot slice a {} value", obj.type_name());
  // Python's slice.indices().
  auto norm = [&](const Value& v, int64_t def_pos, int64_t def_neg) {
    if (v.is_none()) return st > 0 ? def_pos : def_neg;
    int64_t i = int_arg(&v, 0, "slice index");
    if (i < 0) { i += n; if (i < 0) i = st > 0 ? 0 : -1; }
    else if (i >= n) i = st > 0 ? n : n - 1;
    return i;
  };
  int64_t b = norm(start, 0, n - 1), e = norm(stop, n, -1);
  std::vector<int64_t> idx;
  if (st > 0) for (int64_t i = b; i < e; i += st) idx.push_back(i);
  else for (int64_t i = b; i > e; i += st) idx.push_back(i);
  if (obj.is_list()) {
    List l;
    for (int64_t i : idx) l.push_back(obj.list()[static_cast<size_t>(i)]);
    return Value(std::move(l));
  }
  std::string s;
  for (int64_t i : idx) tokenizer::utf8_append(s, cps[static_cast<size_t>(i)]);
  return Value(std::move(s));
}

std::optional<Value> call_method(const Value& obj, const std::string& name, List& args, Kwargs& kw) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "startswith" || name == "endswith") {
      const Value* p = arg(args, kw, 0, "prefix");
      if (!p) fail("{}() needs an argument", name);
      List cands = p->is_list() ? p->list() : List{*p};
      for (const auto& c : cands) {
        if (!c.is_string()) fail("{}() needs a string, not {}", name, c.type_name());
        const std::string& x = c.str();
        bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                        : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
        if (hit) return Value(true);
      }
      return Value(false);
    }
    if (name == "strip") return Value(strip(s, arg(args, kw, 0, "chars"), true, true));
    if (name == "lstrip") return Value(strip(s, arg(args, kw, 0, "chars"), true, false));
    if (name == "rstrip") return Value(strip(s, arg(args, kw, 0, "chars"), false, true));
    if (name == "split") return Value(split(s, arg(args, kw, 0, "sep"), int_arg(arg(args, kw, 1, "maxsplit"), -1, "maxsplit")));
    if (name == "splitlines") {
      List l;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t k = s.find_first_of("\r\n", pos);
        if (k == std::string::npos) { l.push_back(Value(s.substr(pos))); break; }
        l.push_back(Value(s.substr(pos, k - pos)));
        pos = k + (s.compare(k, 2, "\r\n") == 0 ? 2 : 1);
      }
      return Value(std::move(l));
    }
    if (name == "upper") return Value(tokenizer::to_upper(s));
    if (name == "lower") return Value(tokenizer::to_lower(s));
    if (name == "title") return Value(title(s, false));
    if (name == "capitalize") return Value(title(s, true));
    if (name == "replace") {
      const Value *a = arg(args, kw, 0, "old"), *b = arg(args, kw, 1, "new");
      if (!a || !b || !a->is_string() || !b->is_string()) fail("replace() needs two strings");
      return Value(replace(s, a->str(), b->str(), int_arg(arg(args, kw, 2, "count"), -1, "count")));
    }
    if (name == "find" || name == "rfind" || name == "count" || name == "index") {
      const Value* a = arg(args, kw, 0, "sub");
      if (!a || !a->is_string()) fail("{}() needs a string", name);
      if (name == "count") {
        int64_t n = 0;
        if (a->str().empty()) return Value(length(obj) + 1);
        for (size_t k = s.find(a->str()); k != std::string::npos; k = s.find(a->str(), k + a->str().size())) ++n;
        return Value(n);
      }
      size_t k = name == "rfind" ? s.rfind(a->str()) : s.find(a->str());
      if (k == std::string::npos) {
        if (name == "index") fail("substring not found");
        return Value(int64_t{-1});
      }
      return Value(static_cast<int64_t>(tokenizer::utf8_length(std::string_view(s).substr(0, k))));
    }
    if (name == "join") {
      const Value* a = arg(args, kw, 0, "iterable");
      if (!a) fail("join() needs an argument");
      std::string out;
      List items = iterate(*a);
      for (size_t i = 0; i < items.size(); ++i) out += (i ? s : "") + items[i].to_string();
      return Value(std::move(out));
    }
    if (name == "format") return Value(format_str(s, args, kw));
    auto all = [&](auto pred) {
      auto cps = code_points(s);
      return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
    };
    if (name == "isdigit") return all([](uint32_t c) { return c >= '0' && c <= '9'; });
    if (name == "isspace") return all(py_space);
    if (name == "isalpha")
      return all([](uint32_t c) { auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c)); return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO; });
    return std::nullopt;
  }
  if (obj.is_dict() && !obj.is_namespace()) {
    Dict& d = obj.dict();
    if (name == "get") {
      const Value* k = arg(args, kw, 0, "key");
      if (!k) fail("get() needs a key");
      const Value* v = k->is_string() ? d.find(k->str()) : nullptr;
      if (v) return *v;
      const Value* def = arg(args, kw, 1, "default");
      return def ? *def : Value::none();
    }
    if (name == "items") {
      List l;
      for (const auto& [k, v] : d.items) l.push_back(Value(List{Value(k), v}));
      return Value(std::move(l));
    }
    if (name == "keys") {
      List l;
      for (const auto& [k, v] : d.items) l.push_back(Value(k));
      return Value(std::move(l));
    }
    if (name == "values") {
      List l;
      for (const auto& [k, v] : d.items) l.push_back(v);
      return Value(std::move(l));
    }
    return std::nullopt;
  }
  if (obj.is_list()) {
    List& l = obj.list();
    if (name == "append") {
      if (args.size() != 1) fail("append() takes one argument");
      l.push_back(args[0]);
      return Value::none();
    }
    if (name == "extend") {
      if (args.size() != 1) fail("extend() takes one argument");
      List more = iterate(args[0]);
      l.insert(l.end(), more.begin(), more.end());
      return Value::none();
    }
    if (name == "pop") {
      if (l.empty()) fail("pop from empty list");
      int64_t n = static_cast<int64_t>(l.size());
      int64_t i = int_arg(arg(args, kw, 0, "index"), n - 1, "index");
      if (i < 0) i += n;
      if (i < 0 || i >= n) fail("pop index out of range");
      Value v = l[static_cast<size_t>(i)];
      l.erase(l.begin() + i);
      return v;
    }
    if (name == "index" || name == "count") {
      if (args.size() != 1) fail("{}() takes one argument", name);
      int64_t n = 0;
      for (size_t i = 0; i < l.size(); ++i) {
        if (!equal(l[i], args[0])) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") fail("value not in list");
      return Value(n);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// ---- tests ----

bool is_known_test(const std::string& n) {
  static const std::set<std::string> k = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false",
      "mapping", "iterable", "sequence", "callable", "equalto", "eq", "==", "ne", "!=", "lt", "<", "gt", ">",
      "le", "<=", "ge", ">=", "odd", "even", "divisibleby", "in", "lower", "upper", "sameas", "greaterthan",
      "lessthan"};
  return k.count(n) > 0;
}

bool apply_test(const std::string& n, const Value& v, List& args) {
  auto need = [&]() -> const Value& {
    if (args.empty()) fail("test '{}' needs an argument", n);
    return args[0];
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "string") return v.is_string();
  if (n == "number") return v.is_number();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.as_bool();
  if (n == "false") return v.is_bool() && !v.as_bool();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (n == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (n == "callable") return v.is_function();
  if (n == "equalto" || n == "eq" || n == "==" || n == "sameas") return equal(v, need());
  if (n == "ne" || n == "!=") return !equal(v, need());
  if (n == "lt" || n == "<" || n == "lessthan") return less(v, need());
  if (n == "gt" || n == ">" || n == "greaterthan") return less(need(), v);
  if (n == "le" || n == "<=") return !less(need(), v);
  if (n == "ge" || n == ">=") return !less(v, need());
  if (n == "odd" || n == "even" || n == "divisibleby") {
    if (!v.is_int()) fail("test '{}' needs an integer, not {}", n, v.type_name());
    if (n == "odd") return v.as_int() % 2 != 0;
    if (n == "even") return v.as_int() % 2 == 0;
    int64_t d = int_arg(&need(), 1, "divisibleby");
    if (d == 0) fail("divisibleby 0");
    return v.as_int() % d == 0;
  }
  if (n == "in") {
    const Value& c = need();
    if (c.is_string()) return v.is_string() && c.str().find(v.str()) != std::string::npos;
    if (c.is_dict()) return v.is_string() && c.dict().find(v.str());
    for (const auto& x : iterate(c)) if (equal(x, v)) return true;
    return false;
  }
  if (n == "lower") return v.is_string() && tokenizer::to_lower(v.str()) == v.str();
  if (n == "upper") return v.is_string() && tokenizer::to_upper(v.str()) == v.str();
  fail("unsupported test '{}'", n);
}

// ---- globals ----

void add_globals(Dict& g) {
  g.set("range", Value(Function([](List& args, Kwargs&) {
    int64_t start = 0, stop, step = 1;
    if (args.size() == 1) stop = int_arg(&args[0], 0, "range stop");
    else if (args.size() == 2 || args.size() == 3) {
      start = int_arg(&args[0], 0, "range start");
      stop = int_arg(&args[1], 0, "range stop");
      if (args.size() == 3) step = int_arg(&args[2], 1, "range step");
    } else fail("range() takes 1 to 3 arguments");
    if (step == 0) fail("range() step must not be zero");
    List l;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) l.push_back(Value(i));
    return Value(std::move(l));
  })));
  g.set("namespace", Value(Function([](List& args, Kwargs& kw) {
    Dict d;
    for (const auto& a : args) {
      if (!a.is_dict()) fail("namespace() takes keyword arguments or a dict");
      for (const auto& [k, v] : a.dict().items) d.set(k, v);
    }
    for (const auto& [k, v] : kw) d.set(k, v);
    return Value(std::move(d), true);
  })));
  g.set("dict", Value(Function([](List& args, Kwargs& kw) {
    Dict d;
    for (const auto& a : args) {
      if (!a.is_dict()) fail("dict() takes keyword arguments or a dict");
      for (const auto& [k, v] : a.dict().items) d.set(k, v);
    }
    for (const auto& [k, v] : kw) d.set(k, v);
    return Value(std::move(d));
  })));
  g.set("raise_exception", Value(Function([](List& args, Kwargs&) -> Value {
    fail("the chat template raised an error: {}", args.empty() ? std::string("(no message)") : args[0].to_string());
  })));
  g.set("strftime_now", Value(Function([](List& args, Kwargs&) {
    if (args.empty() || !args[0].is_string()) fail("strftime_now() needs a format string");
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof buf, args[0].str().c_str(), &tm);
    return Value(std::string(buf, n));
  })));
}

}  // namespace deltafin::jinja
