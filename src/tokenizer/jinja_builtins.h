// Filters, tests, methods and global functions of the chat-template
// interpreter (internal to jinja_*.cc). Errors are thrown as Error without
// a line; the interpreter adds the template line.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/jinja_value.h"

namespace deltafin::jinja {

Value apply_filter(const std::string& name, const Value& v, List& args, Kwargs& kwargs);
bool apply_test(const std::string& name, const Value& v, List& args);
// obj.name(args...) for the str / dict / list methods templates use; nullopt
// when `name` is no method of obj's type.
std::optional<Value> call_method(const Value& obj, const std::string& name, List& args, Kwargs& kwargs);
// obj.name: a dict key, a namespace attribute, or undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key] with Python semantics (negative list indices); undefined if absent.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on lists and strings (code points).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop walks: list items, dict keys, string characters.
List iterate(const Value& v);
// range, namespace, dict, raise_exception, strftime_now.
void add_globals(Dict& globals);
// Python-style kwarg lookup: positional index `pos` or keyword `name`.
const Value* arg(const List& args, const Kwargs& kwargs, size_t pos, const char* name);

}  // namespace deltafin::jinja
