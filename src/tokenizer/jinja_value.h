// Values of the chat-template interpreter (a Jinja subset): Python-like
// undefined / none / bool / int / float / str / list / dict / callable.
// Lists and dicts are shared by reference, as in Python.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin::jinja {

class Value;
using List = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

// An insertion-ordered dict with string keys.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

using Function = std::function<Value(List& args, Kwargs& kwargs)>;

class Value {
 public:
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // undefined
  static Value none() { Value v; v.type_ = Type::None; return v; }
  Value(bool b) : type_(Type::Bool), b_(b) {}
  Value(int v) : type_(Type::Int), i_(v) {}
  Value(int64_t v) : type_(Type::Int), i_(v) {}
  Value(double v) : type_(Type::Float), f_(v) {}
  Value(std::string s) : type_(Type::String), s_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(List l) : type_(Type::List), l_(std::make_shared<List>(std::move(l))) {}
  Value(Dict d, bool is_namespace = false)
      : type_(Type::Dict), d_(std::make_shared<Dict>(std::move(d))), namespace_(is_namespace) {}
  Value(Function f) : type_(Type::Function), fn_(std::make_shared<Function>(std::move(f))) {}

  // From JSON (objects keep their key order).
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::Undefined; }
  bool is_none() const { return type_ == Type::None; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_float() const { return type_ == Type::Float; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Float; }
  bool is_string() const { return type_ == Type::String; }
  bool is_list() const { return type_ == Type::List; }
  bool is_dict() const { return type_ == Type::Dict; }
  bool is_namespace() const { return type_ == Type::Dict && namespace_; }
  bool is_function() const { return type_ == Type::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return type_ == Type::Float ? static_cast<int64_t>(f_) : type_ == Type::Bool ? b_ : i_; }
  double as_float() const { return type_ == Type::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return *s_; }
  List& list() const { return *l_; }
  Dict& dict() const { return *d_; }
  Function& fn() const { return *fn_; }

  // Python truthiness.
  bool truthy() const;
  // str(value) as Jinja prints it ("" for undefined, "None", "True", 1.0 -> "1.0").
  std::string to_string() const;
  // Python repr() (strings quoted), used inside lists and dicts.
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent, separators, sort_keys).
  std::string to_json(int indent = -1, std::string_view item_sep = ", ", std::string_view key_sep = ": ",
                      bool sort_keys = false, int depth = 0) const;
  // Type name for error messages ("str", "int", "dict", ...).
  const char* type_name() const;

 private:
  Type type_ = Type::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Function> fn_;
  bool namespace_ = false;
};

// Python ==.
bool equal(const Value& a, const Value& b);
// Python <, for numbers, strings and lists; throws Error otherwise.
bool less(const Value& a, const Value& b);

}  // namespace deltafin::jinja
