// Python str semantics and argument helpers shared by the interpreter's
// filters and methods (internal to jinja_*.cc). Strings are UTF-8; lengths,
// indices and character sets are in code points, as in Python.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace deltafin::jinja::detail {

std::vector<uint32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<uint32_t>& cps, size_t b, size_t e);
// Python str.isspace() for one code point.
bool py_space(uint32_t c);
// str.strip/lstrip/rstrip(chars): whitespace when chars is null/None.
std::string strip(const std::string& s, const Value* chars, bool left, bool right);
// str.split(sep, maxsplit): whitespace runs when sep is null/None.
List split(const std::string& s, const Value* sep, int64_t maxsplit);
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
// str.title() (only_first: str.capitalize()).
std::string title(const std::string& s, bool only_first);
// len(): code points of a str, items of a list or dict, 0 for undefined.
int64_t length(const Value& v);
int64_t int_arg(const Value* v, int64_t def, const char* what);
bool bool_arg(const Value* v, bool def);
std::string html_escape(const std::string& s);
// "a.b.0" attribute paths of map/selectattr/sort/join.
Value attr_path(const Value& v, const std::string& path);
// str.format with {} / {0} / {name} fields (no format specs).
std::string format_str(const std::string& fmt_s, const List& args, const Kwargs& kw);

}  // namespace deltafin::jinja::detail
