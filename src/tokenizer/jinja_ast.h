// Syntax tree of a parsed chat template (internal to jinja_*.cc).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace deltafin::jinja {

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    Attr,       // a.name
    Index,      // a[b]
    Slice,      // a[b:c:d] (b, c, d may be null)
    Call,       // a(args, kwargs)
    Filter,     // a | name(args, kwargs); a null for filter blocks
    Test,       // a is [not] name(args)
    Unary,      // op a   ("not", "-", "+")
    Binary,     // a op b
    Cond,       // a if b else c
    ListLit,    // [args]
    TupleLit,   // (args)
    DictLit,    // {kwargs-like pairs of exprs: keys in args, values in args2}
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name, attribute, filter/test name, operator
  bool negated = false;
  std::unique_ptr<Expr> a, b, c, d;
  std::vector<std::unique_ptr<Expr>> args, args2;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue };
  Kind kind;
  int line = 0;
  std::string text;                   // Text
  std::unique_ptr<Expr> expr;         // Output, Set value, For iterable
  // If: (condition, body) pairs; a null condition is the else branch.
  std::vector<std::pair<std::unique_ptr<Expr>, std::vector<Node>>> branches;
  std::vector<std::string> targets;   // For / Set names; Set "ns.attr" has target {ns, attr} and attr_set
  bool attr_set = false;
  std::unique_ptr<Expr> filter;       // For ... if filter
  std::vector<Node> body, else_body;  // For body/else, SetBlock/Macro body
  std::string macro_name;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> params;  // Macro params (default may be null)
};

}  // namespace deltafin::jinja

namespace deltafin::jinja {
// Parses template source into its node list. Throws Error "<name> line N: ...".
std::vector<Node> parse_template(std::string_view source, const std::string& name);
// Names the parser accepts after `|` and `is` (implemented in jinja_builtins.cc).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
}  // namespace deltafin::jinja
