#include "tokenizer/jinja_strings.h"

#include <utf8proc.h>

#include <algorithm>
#include <set>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::jinja::detail {

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

}  // namespace deltafin::jinja::detail
