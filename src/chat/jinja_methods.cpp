// Methods of str, dict and list values, global functions, and Python's < and `in`.
#include <algorithm>
#include <ctime>

#include "jinja_util.h"

namespace mtp::chat::jinja {
namespace {

size_t cp_index(const std::string& s, size_t byte_pos) {
  return code_points(std::string_view(s).substr(0, byte_pos)).size();
}

Value string_method(const Value& obj, const std::string& name) {
  const std::string s = obj.s;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return method(
        name, [s, l, r](CallArgs& a) { return Value::string(py_strip(s, l, r, arg_str(a, "chars", 0))); });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return method(name, [s, right](CallArgs& a) {
      const std::string* sep = arg_str(a, "sep", 0);
      int64_t maxsplit = arg_int(a, "maxsplit", 1, -1);
      if (right && maxsplit >= 0) fail(a.line, "unsupported: rsplit with maxsplit");
      return str_list(sep ? split_sep(s, *sep, maxsplit, a.line) : split_ws(s, maxsplit));
    });
  }
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return method(name, [s, start](CallArgs& a) {
      const Value* p = arg(a, "prefix", 0);
      if (!p) fail(a.line, "startswith/endswith needs an argument");
      std::vector<std::string> options;
      if (p->is_string()) {
        options.push_back(p->s);
      } else if (p->is_list() && p->is_tuple) {
        for (const Value& x : *p->list) {
          if (!x.is_string()) fail(a.line, "startswith/endswith: tuple items must be strings");
          options.push_back(x.s);
        }
      } else {
        fail(a.line, "startswith/endswith: argument must be a str or a tuple of str");
      }
      if (a.args.size() > 1) fail(a.line, "unsupported: startswith/endswith with start/end");
      for (const auto& o : options) {
        if (o.size() <= s.size() &&
            (start ? s.compare(0, o.size(), o) : s.compare(s.size() - o.size(), o.size(), o)) == 0) {
          return Value::boolean(true);
        }
      }
      return Value::boolean(false);
    });
  }
  if (name == "upper" || name == "lower") {
    bool up = name == "upper";
    return method(name, [s, up](CallArgs&) { return Value::string(ascii_case(s, up)); });
  }
  if (name == "capitalize") return method(name, [s](CallArgs&) { return Value::string(capitalize(s)); });
  if (name == "title") return method(name, [s](CallArgs&) { return Value::string(title_case(s, false)); });
  if (name == "replace") {
    return method(name, [s](CallArgs& a) {
      return Value::string(py_replace(s, *arg_str(a, "old", 0, true), *arg_str(a, "new", 1, true),
                                      arg_int(a, "count", 2, -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    return method(name, [s, name](CallArgs& a) -> Value {
      const std::string& sub = *arg_str(a, "sub", 0, true);
      if (a.args.size() > 1) fail(a.line, str_cat("unsupported: str.", name, " with start/end"));
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(code_points(s).size()) + 1);
        int64_t n = 0;
        for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
        return Value::integer(n);
      }
      size_t pos = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (pos == std::string::npos) {
        if (name == "index") fail(a.line, "substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(cp_index(s, pos)));
    });
  }
  if (name == "join") {
    return Value::callable(name, [s](Interpreter& in, CallArgs& a) {
      if (a.args.empty()) fail(a.line, "join needs an argument");
      std::string out;
      bool first = true;
      for (const Value& x : in.iterate(a.args[0], a.line)) {
        if (!x.is_string())
          fail(a.line, str_cat("sequence item: expected str instance, ", type_name(x), " found"));
        if (!first) out += s;
        first = false;
        out += x.s;
      }
      return Value::string(out);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return method(name, [s, prefix](CallArgs& a) {
      const std::string& x = *arg_str(a, "affix", 0, true);
      if (x.size() <= s.size()) {
        if (prefix && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
        if (!prefix && s.compare(s.size() - x.size(), x.size(), x) == 0)
          return Value::string(s.substr(0, s.size() - x.size()));
      }
      return Value::string(s);
    });
  }
  if (name == "splitlines") {
    return method(name, [s](CallArgs& a) {
      std::vector<std::string> lines;
      bool keep = arg_bool(a, "keepends", 0, false);
      size_t start = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] != '\n' && s[k] != '\r') continue;
        size_t end = k;
        if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
        lines.push_back(s.substr(start, (keep ? k + 1 : end) - start));
        start = k + 1;
      }
      if (start < s.size()) lines.push_back(s.substr(start));
      return str_list(lines);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return method(name, [s, name](CallArgs&) {
      if (s.empty()) return Value::boolean(false);
      auto all = [&](int (*f)(int)) {
        return std::all_of(s.begin(), s.end(), [f](char c) { return f(static_cast<unsigned char>(c)) != 0; });
      };
      if (name == "isdigit") return Value::boolean(all(::isdigit));
      if (name == "isalpha") return Value::boolean(all(::isalpha));
      if (name == "isalnum") return Value::boolean(all(::isalnum));
      if (name == "isspace") return Value::boolean(all(::isspace));
      bool has_cased = std::any_of(s.begin(), s.end(),
                                   [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
      if (name == "islower") return Value::boolean(has_cased && ascii_case(s, false) == s);
      return Value::boolean(has_cased && ascii_case(s, true) == s);
    });
  }
  if (name == "format" || name == "encode" || name == "center" || name == "ljust" || name == "rjust" ||
      name == "zfill" || name == "partition" || name == "translate" || name == "expandtabs") {
    return unsupported_method("str", name);
  }
  return Value::undefined();
}

Value method_of(const Value& obj, const std::string& name) {
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_mapping()) {
    auto d = obj.dict;
    if (name == "items") return method(name, [obj](CallArgs&) { return pairs(obj); });
    if (name == "keys" || name == "values") {
      bool keys = name == "keys";
      return method(name, [d, keys](CallArgs&) {
        ValueList out;
        for (const auto& [k, v] : d->items) out.push_back(keys ? Value::string(k) : v);
        return Value::make_list(std::move(out));
      });
    }
    if (name == "get") {
      return method(name, [d](CallArgs& a) {
        const Value* key = arg(a, "key", 0);
        if (!key) fail(a.line, "dict.get needs a key");
        const Value* v = key->is_string() ? d->find(key->s) : nullptr;
        if (v) return *v;
        const Value* dflt = arg(a, "default", 1);
        return dflt ? *dflt : Value::none();
      });
    }
    if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear") {
      return unsupported_method("dict", name);
    }
    return Value::undefined();
  }
  if (obj.is_list()) {
    auto l = obj.list;
    if (name == "index" || name == "count") {
      bool count = name == "count";
      return method(name, [l, count](CallArgs& a) {
        if (a.args.empty()) fail(a.line, "list.index/count needs an argument");
        int64_t n = 0;
        for (size_t k = 0; k < l->size(); ++k) {
          if (!equals((*l)[k], a.args[0])) continue;
          if (!count) return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
        if (!count) fail(a.line, "list.index(x): x not in list");
        return Value::integer(n);
      });
    }
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
        name == "clear" || name == "sort" || name == "reverse") {
      return unsupported_method("list", name);
    }
  }
  return Value::undefined();
}

}  // namespace

Value bound_method(const Value& obj, const std::string& name) {
  Value m = method_of(obj, name);
  // The method holds its object: it counts as nested as the object, and as holding its namespaces (so that
  // `set ns.f = d.items` cannot close a cycle through a dict that holds ns).
  if (!m.is_undefined()) {
    m.depth = obj.depth;
    m.holds_namespace = obj.holds_namespace;
  }
  return m;
}

Value global_function(const std::string& name) {
  if (name == "range") {
    return Value::callable(name, [](Interpreter& in, CallArgs& a) {
      if (a.args.empty() || a.args.size() > 3) fail(a.line, "range expects 1 to 3 arguments");
      int64_t start = 0, stop, step = 1;
      if (a.args.size() == 1) {
        stop = int_of(a.args[0], a.line);
      } else {
        start = int_of(a.args[0], a.line);
        stop = int_of(a.args[1], a.line);
        if (a.args.size() == 3) step = int_of(a.args[2], a.line);
      }
      if (step == 0) fail(a.line, "range() arg 3 must not be zero");
      // The count first, in unsigned arithmetic: stepping k past INT64_MAX would overflow.
      const bool up = step > 0;
      const uint64_t magnitude = up ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
      const uint64_t span = up ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
                               : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
      const uint64_t count = (up ? stop > start : stop < start) ? (span - 1) / magnitude + 1 : 0;
      if (count > 1000000) fail(a.line, "range() too large (more than 1000000 items)");
      in.charge(count, a.line);
      ValueList out;
      out.reserve(count);
      for (uint64_t k = 0; k < count; ++k)
        out.push_back(Value::integer(
            static_cast<int64_t>(static_cast<uint64_t>(start) + k * (up ? magnitude : 0 - magnitude))));
      return Value::make_list(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return method(name, [ns](CallArgs& a) {
      ValueDict d;
      for (const Value& x : a.args) {
        if (!x.is_mapping()) fail(a.line, "namespace()/dict() positional argument must be a dict");
        for (const auto& [k, v] : x.dict->items) d.set(k, v);
      }
      for (const auto& [k, v] : a.kwargs) d.set(k, v);
      Value out = Value::make_dict(std::move(d));
      if (ns && out.holds_namespace) fail(a.line, "a namespace() cannot hold another namespace");
      out.is_namespace = ns;
      out.holds_namespace = out.holds_namespace || ns;
      return out;
    });
  }
  if (name == "raise_exception") {
    return method(name, [](CallArgs& a) -> Value {
      throw Error{a.line, a.args.empty() ? std::string() : to_str(a.args[0]), true};
    });
  }
  if (name == "strftime_now") {
    return method(name, [](CallArgs& a) {
      const std::string* fmt = arg_str(a, "format", 0, true);
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof(buf), fmt->c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
  }
  return Value::undefined();
}

bool less_than(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      return (a.kind == Value::Kind::kBool ? a.b : a.i) < (b.kind == Value::Kind::kBool ? b.b : b.i);
    }
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;
  if (a.is_list() && b.is_list()) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (!equals((*a.list)[k], (*b.list)[k])) return less_than((*a.list)[k], (*b.list)[k], line);
    }
    return a.list->size() < b.list->size();
  }
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) fail(line, v->s.empty() ? "comparison with an undefined value" : v->s);
  }
  fail(line, str_cat("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'"));
}

bool contains(const Value& container, const Value& item, int line) {
  switch (container.kind) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        fail(line, str_cat("'in <string>' requires string as left operand, not ", type_name(item)));
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.list->begin(), container.list->end(),
                         [&](const Value& x) { return equals(x, item); });
    case Value::Kind::kDict:
      if (container.is_namespace) break;
      return item.is_string() && container.dict->find(item.s) != nullptr;
    default:
      break;
  }
  fail(line, str_cat("argument of type '", type_name(container), "' is not iterable"));
}

}  // namespace mtp::chat::jinja
