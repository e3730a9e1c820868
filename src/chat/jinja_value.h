// The value type of the Jinja interpreter (private to the chat library). It models the Python objects that
// chat templates see: None, bool, int, float, str, list/tuple, dict (insertion-ordered, string keys), Jinja's
// Undefined, namespace() objects and callables (macros, bound methods, globals). Lists and dicts are shared
// and immutable once built, as in Jinja's ImmutableSandboxedEnvironment; only a namespace is mutated in
// place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja.h"

namespace mtp::chat::jinja {

// A template error. Thrown inside the interpreter only; JinjaTemplate turns it into a Status at its boundary.
struct Error {
  int line = 0;  // 0: no line known
  std::string message;
  bool raised = false;  // raise_exception() from the template itself
};
[[noreturn]] void fail(int line, std::string message);

struct Value;
using ValueList = std::vector<Value>;

// Lists and dicts nested deeper than this are refused when built: printing, comparing, serializing and
// destroying a value all recurse once per level, and a template loop could otherwise nest one level per
// iteration until the stack overflows.
inline constexpr int kMaxValueDepth = 512;

struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  int line = 0;
  // The keyword argument `name`, or else the positional argument at `pos`, or else nullptr.
  const Value* get(std::string_view name, size_t pos) const;
};

class Interpreter;
struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

struct Value {
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Kind kind = Kind::kUndefined;
  bool is_tuple = false;      // a list that prints as (a, b)
  bool is_namespace = false;  // a dict whose attributes `set ns.x = ...` may assign
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // the string; for Undefined, the message an error about it would give
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;
  std::shared_ptr<Callable> fn;
  // Containers: 1 + the depth of their deepest item, as built. A namespace is mutable, so a container that
  // holds one may be deeper than it says, but by at most the namespace's own depth: namespaces never hold
  // namespaces (holds_namespace is refused in namespace() and `set ns.x`), which also rules out cycles.
  int depth = 0;
  bool holds_namespace = false;

  static Value undefined(std::string hint = {}) {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value none() { return make(Kind::kNone); }
  static Value boolean(bool x) {
    Value v = make(Kind::kBool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(Kind::kInt);
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v = make(Kind::kFloat);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = make(Kind::kString);
    v.s = std::move(x);
    return v;
  }
  static Value make_list(ValueList items, bool tuple = false) {
    Value v = make(Kind::kList);
    for (const Value& item : items) v.contain(item);
    v.list = std::make_shared<ValueList>(std::move(items));
    v.is_tuple = tuple;
    return v;
  }
  static Value make_dict(ValueDict d = {}) {
    Value v = make(Kind::kDict);
    for (const auto& [key, item] : d.items) v.contain(item);
    v.dict = std::make_shared<ValueDict>(std::move(d));
    return v;
  }
  static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> f) {
    Value v = make(Kind::kCallable);
    v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(f)});
    return v;
  }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_mapping() const { return kind == Kind::kDict && !is_namespace; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  double as_double() const {
    return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i);
  }

  // Accounts for `item` inside this container (depth and namespaces); fails past kMaxValueDepth.
  void contain(const Value& item) {
    if (item.depth + 1 > depth) depth = item.depth + 1;
    if (depth > kMaxValueDepth)
      fail(0, "value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
    holds_namespace = holds_namespace || item.holds_namespace;
  }

 private:
  static Value make(Kind k) {
    Value v;
    v.kind = k;
    v.depth = k == Kind::kList || k == Kind::kDict ? 1 : 0;
    return v;
  }
};

// Python's type name of a value ("str", "dict", ...), for error messages that match Jinja's.
std::string type_name(const Value& v);
// Python truthiness; Undefined is false.
bool truthy(const Value& v);
// Python str(); Undefined is "". Containers print as Python's repr does.
std::string to_str(const Value& v);
// Python repr().
std::string repr(const Value& v);
// Python ==, with 1 == 1.0 == True.
bool equals(const Value& a, const Value& b);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: None (one line)
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Python's json.dumps, which transformers' `tojson` filter calls. Fails on Undefined and callables.
std::string json_dumps(const Value& v, const JsonDumpOptions& opt, int line);
// Python's float repr: shortest round-trip digits, "1.0", "1e+20", "1e-07", "inf", "nan".
std::string python_float(double d);

// Converts the template's input (a JSON value) and back. Nesting deeper than `max_depth` fails.
Value from_json(const Json& j, int max_depth);

// Unicode helpers on UTF-8 strings, for Python's code-point semantics of len(), indexing and slicing.
std::vector<std::string_view> code_points(std::string_view s);
bool is_py_space(uint32_t cp);
std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars);

}  // namespace mtp::chat::jinja
