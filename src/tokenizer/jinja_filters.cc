// Filters of the chat-template interpreter.
#include <algorithm>
#include <cmath>
#include <set>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::jinja {

using namespace detail;

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

}  // namespace deltafin::jinja
