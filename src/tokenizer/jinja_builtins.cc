#include "tokenizer/jinja_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::jinja {

namespace {

// ---- code points ----

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                              static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) { out.push_back(0xFFFD); ++i; continue; }
    out.push_back(static_cast<uint32_t>(cp));
    i += static_cast<size_t>(n);
  }
  return out;
}
std::string from_code_points(const std::vector<uint32_t>& cps, size_t b, size_t e) {
  std::string out;
  for (size_t i = b; i < e; ++i) tokenizer::utf8_append(out, cps[i]);
  return out;
}
// Python str.isspace() for one code point.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = code_points(s);
  std::set<uint32_t> set;
  bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) {
    if (!chars->is_string()) fail("strip() chars must be a string, not {}", chars->type_name());
    for (uint32_t c : code_points(chars->str())) set.insert(c);
  }
  auto drop = [&](uint32_t c) { return ws ? py_space(c) : set.count(c) > 0; };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && drop(cps[b])) ++b;
  if (right) while (e > b && drop(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

List split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  if (!sep || sep->is_none() || sep->is_undefined()) {
    // Runs of whitespace; no empty strings.
    auto cps = code_points(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py_space(cps[e - 1])) --e;
        out.push_back(Value(from_code_points(cps, i, e)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_space(cps[j])) ++j;
      out.push_back(Value(from_code_points(cps, i, j)));
      i = j;
    }
    return out;
  }
  if (!sep->is_string() || sep->str().empty()) fail("split() separator must be a non-empty string");
  const std::string& d = sep->str();
  size_t pos = 0;
  while (true) {
    size_t k = s.find(d, pos);
    if (k == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) break;
    out.push_back(Value(s.substr(pos, k - pos)));
    pos = k + d.size();
  }
  out.push_back(Value(s.substr(pos)));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  if (from.empty()) {
    // Python inserts `to` between every character.
    auto cps = code_points(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) { out += to; ++n; }
      if (i < cps.size()) tokenizer::utf8_append(out, cps[i]);
    }
    return out;
  }
  while (count < 0 || n < count) {
    size_t k = s.find(from, pos);
    if (k == std::string::npos) break;
    out.append(s, pos, k - pos);
    out += to;
    pos = k + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string title(const std::string& s, bool only_first) {
  std::string out;
  bool prev_cased = false, first_done = false;
  for (uint32_t c : code_points(s)) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    bool cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
    uint32_t m;
    if (only_first) {
      m = !first_done ? static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)))
                      : static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
      first_done = true;
    } else {
      m = prev_cased ? static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)))
                     : static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
    }
    tokenizer::utf8_append(out, m);
    prev_cased = cased;
  }
  return out;
}

int64_t length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(tokenizer::utf8_length(v.str()));
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().items.size());
  if (v.is_undefined()) return 0;
  fail("length of a {} value", v.type_name());
}

int64_t int_arg(const Value* v, int64_t def, const char* what) {
  if (!v || v->is_none() || v->is_undefined()) return def;
  if (!v->is_int() && !v->is_bool()) fail("{} must be an integer, not {}", what, v->type_name());
  return v->as_int();
}
bool bool_arg(const Value* v, bool def) { return v && !v->is_undefined() ? v->truthy() : def; }

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// "a.b.0" attribute paths of map/selectattr/sort/join.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits && cur.is_list() ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_attr(cur, part);
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

std::string format_str(const std::string& fmt_s, const List& args, const Kwargs& kw) {
  // str.format with {} / {0} / {name} fields (no format specs).
  std::string out;
  size_t auto_i = 0;
  for (size_t i = 0; i < fmt_s.size(); ++i) {
    char c = fmt_s[i];
    if (c == '{' && i + 1 < fmt_s.size() && fmt_s[i + 1] == '{') { out += '{'; ++i; continue; }
    if (c == '}' && i + 1 < fmt_s.size() && fmt_s[i + 1] == '}') { out += '}'; ++i; continue; }
    if (c != '{') { out += c; continue; }
    size_t e = fmt_s.find('}', i);
    if (e == std::string::npos) fail("format(): unmatched '{{'");
    std::string field = fmt_s.substr(i + 1, e - i - 1);
    if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
      fail("format(): format specs are not supported ('{{{}}}')", field);
    if (field.empty()) {
      if (auto_i >= args.size()) fail("format(): not enough arguments");
      out += args[auto_i++].to_string();
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t k = std::stoul(field);
      if (k >= args.size()) fail("format(): no argument {}", k);
      out += args[k].to_string();
    } else {
      const Value* v = nullptr;
      for (const auto& [k, x] : kw) if (k == field) v = &x;
      if (!v) fail("format(): no argument '{}'", field);
      out += v->to_string();
    }
    i = e;
  }
  return out;
}

}  // namespace

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

// ---- filters ----

bool is_known_filter(const std::string& n) {
  static const std::set<std::string> k = {
      "trim", "length", "count", "tojson", "string", "list", "items", "dictsort", "default", "d", "upper",
      "lower", "title", "capitalize", "replace", "join", "first", "last", "reverse", "sort", "unique", "map",
      "selectattr", "rejectattr", "select", "reject", "int", "float", "abs", "round", "safe", "e", "escape",
      "indent", "sum", "min", "max", "attr", "wordcount", "center", "batch"};
  return k.count(n) > 0;
}

Value apply_filter(const std::string& n, const Value& v, List& args, Kwargs& kw) {
  auto a = [&](size_t i, const char* name) { return arg(args, kw, i, name); };
  if (n == "trim") {
    if (!v.is_string()) fail("trim needs a string, not {}", v.type_name());
    return Value(strip(v.str(), a(0, "chars"), true, true));
  }
  if (n == "length" || n == "count") return Value(length(v));
  if (n == "tojson") {
    int indent = static_cast<int>(int_arg(a(0, "indent"), -1, "indent"));
    std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
    if (const Value* s = arg({}, kw, 0, "separators"); s && !s->is_none()) {
      if (!s->is_list() || s->list().size() != 2 || !s->list()[0].is_string() || !s->list()[1].is_string())
        fail("tojson separators must be a pair of strings");
      item_sep = s->list()[0].str();
      key_sep = s->list()[1].str();
    }
    return Value(v.to_json(indent, item_sep, key_sep, bool_arg(arg({}, kw, 0, "sort_keys"), false)));
  }
  if (n == "string") return Value(v.to_string());
  if (n == "list") return Value(iterate(v));
  if (n == "items" || n == "dictsort") {
    if (v.is_undefined() || v.is_none()) return Value(List{});
    if (!v.is_dict()) fail("{} needs a dict, not {}", n, v.type_name());
    List l;
    for (const auto& [k, x] : v.dict().items) l.push_back(Value(List{Value(k), x}));
    if (n == "dictsort")
      std::stable_sort(l.begin(), l.end(), [](const Value& x, const Value& y) { return x.list()[0].str() < y.list()[0].str(); });
    return Value(std::move(l));
  }
  if (n == "default" || n == "d") {
    const Value* def = a(0, "default_value");
    bool boolean = bool_arg(a(1, "boolean"), false);
    if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value("");
    return v;
  }
  if (n == "upper") return Value(tokenizer::to_upper(v.to_string()));
  if (n == "lower") return Value(tokenizer::to_lower(v.to_string()));
  if (n == "title") return Value(title(v.to_string(), false));
  if (n == "capitalize") return Value(title(v.to_string(), true));
  if (n == "replace") {
    const Value *x = a(0, "old"), *y = a(1, "new");
    if (!x || !y) fail("replace needs old and new strings");
    return Value(replace(v.to_string(), x->to_string(), y->to_string(), int_arg(a(2, "count"), -1, "count")));
  }
  if (n == "join") {
    const Value* sep = a(0, "d");
    const Value* attr = arg({}, kw, 0, "attribute");
    std::string out, s = sep ? sep->to_string() : "";
    List items = iterate(v);
    for (size_t i = 0; i < items.size(); ++i)
      out += (i ? s : "") + (attr ? attr_path(items[i], attr->to_string()) : items[i]).to_string();
    return Value(std::move(out));
  }
  if (n == "first" || n == "last") {
    List items = iterate(v);
    if (items.empty()) return Value();
    return n == "first" ? items.front() : items.back();
  }
  if (n == "reverse") {
    if (v.is_string()) {
      auto cps = code_points(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value(from_code_points(cps, 0, cps.size()));
    }
    List l = iterate(v);
    std::reverse(l.begin(), l.end());
    return Value(std::move(l));
  }
  if (n == "sort") {
    List l = iterate(v);
    bool rev = bool_arg(a(0, "reverse"), false);
    const Value* attr = arg({}, kw, 0, "attribute");
    auto key = [&](const Value& x) { return attr ? attr_path(x, attr->to_string()) : x; };
    std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
      return rev ? less(key(y), key(x)) : less(key(x), key(y));
    });
    return Value(std::move(l));
  }
  if (n == "unique") {
    List out;
    for (const auto& x : iterate(v)) {
      bool seen = false;
      for (const auto& y : out) if (equal(x, y)) { seen = true; break; }
      if (!seen) out.push_back(x);
    }
    return Value(std::move(out));
  }
  if (n == "map") {
    List out;
    const Value* attr = arg({}, kw, 0, "attribute");
    const Value* def = arg({}, kw, 0, "default");
    for (const auto& x : iterate(v)) {
      if (attr) {
        Value r = attr_path(x, attr->to_string());
        out.push_back(r.is_undefined() && def ? *def : r);
      } else {
        if (args.empty() || !args[0].is_string()) fail("map needs attribute=... or a filter name");
        List rest(args.begin() + 1, args.end());
        Kwargs none;
        out.push_back(apply_filter(args[0].str(), x, rest, none));
      }
    }
    return Value(std::move(out));
  }
  if (n == "selectattr" || n == "rejectattr" || n == "select" || n == "reject") {
    bool by_attr = n == "selectattr" || n == "rejectattr";
    bool keep_if = n == "selectattr" || n == "select";
    size_t t0 = by_attr ? 1 : 0;
    if (by_attr && (args.empty() || !args[0].is_string())) fail("{} needs an attribute name", n);
    List out;
    for (const auto& x : iterate(v)) {
      Value subject = by_attr ? attr_path(x, args[0].str()) : x;
      bool r;
      if (args.size() > t0) {
        if (!args[t0].is_string() || !is_known_test(args[t0].str())) fail("{}: unsupported test {}", n, args[t0].repr());
        List targs(args.begin() + static_cast<ptrdiff_t>(t0) + 1, args.end());
        r = apply_test(args[t0].str(), subject, targs);
      } else {
        r = subject.truthy();
      }
      if (r == keep_if) out.push_back(x);
    }
    return Value(std::move(out));
  }
  if (n == "int") {
    if (v.is_int()) return v;
    if (v.is_float() || v.is_bool()) return Value(v.as_int());
    if (v.is_string()) {
      try {
        size_t used = 0;
        int64_t r = std::stoll(v.str(), &used);
        if (used == v.str().size()) return Value(r);
      } catch (const std::exception&) {
      }
    }
    const Value* def = a(0, "default");
    return def ? *def : Value(int64_t{0});
  }
  if (n == "float") {
    if (v.is_number() || v.is_bool()) return Value(v.as_float());
    if (v.is_string()) {
      try {
        return Value(std::stod(v.str()));
      } catch (const std::exception&) {
      }
    }
    const Value* def = a(0, "default");
    return def ? *def : Value(0.0);
  }
  if (n == "abs") {
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    fail("abs needs a number, not {}", v.type_name());
  }
  if (n == "round") {
    if (!v.is_number()) fail("round needs a number, not {}", v.type_name());
    int64_t prec = int_arg(a(0, "precision"), 0, "precision");
    std::string method = a(1, "method") ? a(1, "method")->to_string() : "common";
    double m = std::pow(10.0, static_cast<double>(prec)), x = v.as_float() * m;
    x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value(x / m);
  }
  if (n == "safe") return v;
  if (n == "e" || n == "escape") return Value(html_escape(v.to_string()));
  if (n == "indent") {
    int64_t width = 4;
    std::string pad;
    const Value* w = a(0, "width");
    if (w && w->is_string()) pad = w->str();
    else pad = std::string(static_cast<size_t>(int_arg(w, width, "width")), ' ');
    bool first = bool_arg(a(1, "first"), false), blank = bool_arg(a(2, "blank"), false);
    std::string s = v.to_string(), out;
    size_t pos = 0;
    bool is_first = true;
    while (true) {
      size_t k = s.find('\n', pos);
      std::string line = s.substr(pos, k == std::string::npos ? std::string::npos : k - pos);
      bool add = (!is_first || first) && (blank || !line.empty());
      out += (add ? pad : "") + line;
      if (k == std::string::npos) break;
      out += '\n';
      pos = k + 1;
      is_first = false;
    }
    return Value(std::move(out));
  }
  if (n == "sum") {
    const Value* attr = arg({}, kw, 0, "attribute");
    Value total = a(1, "start") ? *a(1, "start") : Value(int64_t{0});
    for (const auto& x : iterate(v)) {
      Value y = attr ? attr_path(x, attr->to_string()) : x;
      if (total.is_float() || y.is_float()) total = Value(total.as_float() + y.as_float());
      else total = Value(total.as_int() + y.as_int());
    }
    return total;
  }
  if (n == "min" || n == "max") {
    List l = iterate(v);
    if (l.empty()) return Value();
    Value best = l[0];
    for (const auto& x : l) if (n == "min" ? less(x, best) : less(best, x)) best = x;
    return best;
  }
  if (n == "attr") {
    const Value* name = a(0, "name");
    if (!name) fail("attr needs a name");
    return get_attr(v, name->to_string());
  }
  if (n == "wordcount") return Value(static_cast<int64_t>(split(v.to_string(), nullptr, -1).size()));
  if (n == "center") {
    int64_t width = int_arg(a(0, "width"), 80, "width");
    std::string s = v.to_string();
    int64_t len = static_cast<int64_t>(tokenizer::utf8_length(s));
    if (len >= width) return Value(s);
    int64_t left = (width - len) / 2, right = width - len - left;
    return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(right), ' '));
  }
  if (n == "batch") {
    int64_t size = int_arg(a(0, "linecount"), 1, "linecount");
    if (size <= 0) fail("batch size must be positive");
    List out, cur;
    for (const auto& x : iterate(v)) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == size) { out.push_back(Value(cur)); cur.clear(); }
    }
    if (!cur.empty()) {
      if (const Value* fill = a(1, "fill_with"))
        while (static_cast<int64_t>(cur.size()) < size) cur.push_back(*fill);
      out.push_back(Value(cur));
    }
    return Value(std::move(out));
  }
  fail("unsupported filter '{}'", n);
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
