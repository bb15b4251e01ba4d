#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "util/error.h"

namespace deltafin::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
void Dict::set(const std::string& key, Value v) {
  if (Value* p = find(key)) *p = std::move(v);
  else items.emplace_back(key, std::move(v));
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(it.value()));
      return Value(std::move(d));
    }
    default: return Value();
  }
}

bool Value::truthy() const {
  switch (type_) {
    case Type::Undefined: case Type::None: return false;
    case Type::Bool: return b_;
    case Type::Int: return i_ != 0;
    case Type::Float: return f_ != 0;
    case Type::String: return !s_->empty();
    case Type::List: return !l_->empty();
    case Type::Dict: return namespace_ || !d_->items.empty();
    case Type::Function: return true;
  }
  return false;
}

namespace {
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == std::floor(f) && std::fabs(f) < 1e16) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::fixed, 0);
    return std::string(buf, r.ptr) + ".0";
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::string(buf, r.ptr);
}

std::string py_quote(const std::string& s) {
  // Python repr(): single quotes unless the string has ' and no ".
  char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  out += q;
  return out;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}
}  // namespace

std::string Value::to_string() const {
  switch (type_) {
    case Type::Undefined: return "";
    case Type::None: return "None";
    case Type::Bool: return b_ ? "True" : "False";
    case Type::Int: return std::to_string(i_);
    case Type::Float: return float_repr(f_);
    case Type::String: return *s_;
    case Type::Function: return "<function>";
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (type_) {
    case Type::String: return py_quote(*s_);
    case Type::List: {
      std::string out = "[";
      for (size_t i = 0; i < l_->size(); ++i) out += (i ? ", " : "") + (*l_)[i].repr();
      return out + "]";
    }
    case Type::Dict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < d_->items.size(); ++i)
        out += (i ? ", " : "") + py_quote(d_->items[i].first) + ": " + d_->items[i].second.repr();
      return out + (namespace_ ? "}>" : "}");
    }
    default: return to_string();
  }
}

std::string Value::to_json(int indent, std::string_view item_sep, std::string_view key_sep, bool sort_keys,
                           int depth) const {
  switch (type_) {
    case Type::Undefined: case Type::None: return "null";
    case Type::Bool: return b_ ? "true" : "false";
    case Type::Int: return std::to_string(i_);
    case Type::Float: return float_repr(f_);
    case Type::String: return json_quote(*s_);
    case Type::Function: deltafin::fail("chat template: tojson cannot serialize a function");
    case Type::List: case Type::Dict: break;
  }
  std::string pad, child_pad;
  if (indent >= 0) {
    pad = "\n" + std::string(static_cast<size_t>(indent * depth), ' ');
    child_pad = pad + std::string(static_cast<size_t>(indent), ' ');
  }
  std::vector<std::string> parts;
  if (type_ == Type::List) {
    for (const auto& e : *l_) parts.push_back(child_pad + e.to_json(indent, item_sep, key_sep, sort_keys, depth + 1));
  } else {
    auto items = d_->items;
    if (sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [k, v] : items)
      parts.push_back(child_pad + json_quote(k) + std::string(key_sep) +
                      v.to_json(indent, item_sep, key_sep, sort_keys, depth + 1));
  }
  std::string out(1, type_ == Type::List ? '[' : '{');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += item_sep;
    out += parts[i];
  }
  if (indent >= 0 && !parts.empty()) out += pad;
  out += type_ == Type::List ? ']' : '}';
  return out;
}

const char* Value::type_name() const {
  switch (type_) {
    case Type::Undefined: return "undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::List: return "list";
    case Type::Dict: return namespace_ ? "Namespace" : "dict";
    case Type::Function: return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Undefined: case Value::Type::None: return true;
    case Value::Type::String: return a.str() == b.str();
    case Value::Type::List: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!equal(a.list()[i], b.list()[i])) return false;
      return true;
    }
    case Value::Type::Dict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* o = b.dict().find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i])) return true;
      if (less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  deltafin::fail("chat template: cannot compare {} with {}", a.type_name(), b.type_name());
}

}  // namespace deltafin::jinja
