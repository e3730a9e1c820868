// Helpers shared by the builtins (private to the chat library): argument access, Python string operations.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja_interp.h"

namespace mtp::chat::jinja {

// The keyword argument `name`, else the positional one at `pos`, else nullptr (and typed variants).
const Value* arg(const CallArgs& a, std::string_view name, size_t pos);
bool arg_bool(const CallArgs& a, std::string_view name, size_t pos, bool dflt);
const std::string* arg_str(const CallArgs& a, std::string_view name, size_t pos, bool required = false);
int64_t arg_int(const CallArgs& a, std::string_view name, size_t pos, int64_t dflt);
int64_t int_of(const Value& v, int line);

// Python's str.upper()/lower() for one code point and for a string (see case_map for the scripts covered).
std::string case_map(std::string_view cp, bool upper);
std::string ascii_case(const std::string& s, bool upper);
std::string capitalize(const std::string& s);
std::string title_case(const std::string& s, bool jinja_filter);
std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit);
std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit, int line);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
Value str_list(const std::vector<std::string>& parts);

// Jinja's attribute getter for map/selectattr/sort: "a.b.0" walks attributes, integer parts index.
Value get_path(Interpreter& in, const Value& v, const std::string& path, int line);
int64_t py_len(const Value& v, int line);
Value pairs(const Value& dict);  // dict.items() as (key, value) tuples
Value sort_key(Interpreter& in, const Value& v, const std::string* attribute, bool case_sensitive, int line);

// A callable that ignores the interpreter, and one that fails naming an unsupported method.
Value method(const std::string& name, std::function<Value(CallArgs&)> f);
Value unsupported_method(const std::string& type, const std::string& name);

}  // namespace mtp::chat::jinja
