// Filters and tests, with the semantics of Jinja 3 and Python 3.
#include <algorithm>
#include <cmath>
#include <map>

#include "base/html_escape.h"
#include "jinja_util.h"

namespace mtp::chat::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

// ---- filters ----

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  return Value::integer(py_len(v, a.line));
}
Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  return Value::string(py_strip(to_str(v), true, true, arg_str(a, "chars", 0)));
}
Value f_upper(Interpreter&, const Value& v, CallArgs&) {
  return Value::string(ascii_case(to_str(v), true));
}
Value f_lower(Interpreter&, const Value& v, CallArgs&) {
  return Value::string(ascii_case(to_str(v), false));
}
Value f_capitalize(Interpreter&, const Value& v, CallArgs&) {
  return Value::string(capitalize(to_str(v)));
}
Value f_title(Interpreter&, const Value& v, CallArgs&) {
  return Value::string(title_case(to_str(v), true));
}
Value f_tojson(Interpreter&, const Value& v, CallArgs& a) {
  JsonDumpOptions opt;
  opt.ensure_ascii = arg_bool(a, "ensure_ascii", 0, false);
  const Value* indent = arg(a, "indent", 1);
  if (indent && !indent->is_none()) {
    if (indent->is_string()) fail(a.line, "tojson: string indent is not supported");
    opt.indent = static_cast<int>(std::max<int64_t>(0, arg_int(a, "indent", 1, 0)));
    opt.item_separator = ",";
  }
  const Value* seps = arg(a, "separators", 2);
  if (seps && !seps->is_none()) {
    if (!seps->is_list() || seps->list->size() != 2 || !(*seps->list)[0].is_string() ||
        !(*seps->list)[1].is_string()) {
      fail(a.line, "tojson: separators must be a pair of strings");
    }
    opt.item_separator = (*seps->list)[0].s;
    opt.key_separator = (*seps->list)[1].s;
  }
  opt.sort_keys = arg_bool(a, "sort_keys", 3, false);
  return Value::string(json_dumps(v, opt, a.line));
}
Value f_string(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() ? v : Value::string(to_str(v));
}
Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  const Value* dflt = arg(a, "default", 0);
  switch (v.kind) {
    case Value::Kind::kInt:
      return v;
    case Value::Kind::kBool:
      return Value::integer(v.b);
    case Value::Kind::kFloat:
      if (std::isfinite(v.f) && std::fabs(v.f) < 9.2e18) return Value::integer(static_cast<int64_t>(v.f));
      break;
    case Value::Kind::kString: {
      std::string s = py_strip(v.s, true, true, nullptr);
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == 0 && errno == 0) return Value::integer(x);
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(d));
      }
      break;
    }
    default:
      break;
  }
  return dflt ? *dflt : Value::integer(0);
}
Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  const Value* dflt = arg(a, "default", 0);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    std::string s = py_strip(v.s, true, true, nullptr);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == 0) return Value::number(d);
  }
  return dflt ? *dflt : Value::number(0.0);
}
Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  if (v.kind == Value::Kind::kFloat) return Value::number(std::fabs(v.f));
  if (v.kind == Value::Kind::kInt) {
    if (v.i == INT64_MIN) fail(a.line, "integer overflow");
    return Value::integer(v.i < 0 ? -v.i : v.i);
  }
  if (v.kind == Value::Kind::kBool) return Value::integer(v.b);
  fail(a.line, str_cat("bad operand type for abs(): '", type_name(v), "'"));
}
Value f_first(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> items = in.iterate(v, a.line);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> items = in.iterate(v, a.line);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}
Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string* sep = arg_str(a, "d", 0);
  const std::string* attribute = arg_str(a, "attribute", 1);
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v, a.line)) {
    if (!first && sep) out += *sep;
    first = false;
    out += to_str(attribute ? get_path(in, item, *attribute, a.line) : item);
  }
  return Value::string(out);
}
Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  const Value* dflt = arg(a, "default_value", 0);
  bool boolean = arg_bool(a, "boolean", 1, false);
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt ? *dflt : Value::string("");
  return v;
}
Value f_replace(Interpreter&, const Value& v, CallArgs& a) {
  const std::string* from = arg_str(a, "old", 0, true);
  const std::string* to = arg_str(a, "new", 1, true);
  return Value::string(py_replace(to_str(v), *from, *to, arg_int(a, "count", 2, -1)));
}
Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  if (v.is_undefined()) return Value::make_list({});
  if (!v.is_mapping()) fail(a.line, "Can only get item pairs from a mapping.");
  return pairs(v);
}
Value f_list(Interpreter& in, const Value& v, CallArgs& a) {
  return Value::make_list(in.iterate(v, a.line));
}
Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  ValueList out;
  const std::string* attribute = arg_str(a, "attribute", 99);
  if (attribute) {
    const Value* dflt = arg(a, "default", 99);
    for (const Value& item : in.iterate(v, a.line)) {
      Value x = get_path(in, item, *attribute, a.line);
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::make_list(std::move(out));
  }
  if (a.args.empty() || !a.args[0].is_string()) fail(a.line, "map: expected a filter name or attribute=");
  std::string name = a.args[0].s;
  if (!has_filter(name)) fail(a.line, str_cat("map: unknown filter '", name, "'"));
  CallArgs rest;
  rest.line = a.line;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : in.iterate(v, a.line)) out.push_back(call_filter(in, name, item, rest));
  return Value::make_list(std::move(out));
}
Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep_when) {
  size_t first_test = by_attr ? 1 : 0;
  const std::string* attribute = by_attr ? arg_str(a, "attr", 0, true) : nullptr;
  std::string test;
  if (a.args.size() > first_test) {
    if (!a.args[first_test].is_string()) fail(a.line, "select: test name must be a string");
    test = a.args[first_test].s;
    if (!has_test(test)) fail(a.line, str_cat("select: unknown test '", test, "'"));
  }
  CallArgs targs;
  targs.line = a.line;
  if (a.args.size() > first_test + 1)
    targs.args.assign(a.args.begin() + static_cast<long>(first_test) + 1, a.args.end());
  ValueList out;
  for (const Value& item : in.iterate(v, a.line)) {
    Value x = attribute ? get_path(in, item, *attribute, a.line) : item;
    bool ok = test.empty() ? truthy(x) : call_test(in, test, x, targs);
    if (ok == keep_when) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, false);
}
Value f_safe(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() ? v : Value::string(to_str(v));
}
Value f_escape(Interpreter&, const Value& v, CallArgs&) {
  return Value::string(mtp::html_escape(to_str(v)));
}
Value f_indent(Interpreter&, const Value& v, CallArgs& a) {
  const Value* w = arg(a, "width", 0);
  std::string pad =
      w && w->is_string()
          ? w->s
          : std::string(static_cast<size_t>(std::max<int64_t>(0, arg_int(a, "width", 0, 4))), ' ');
  bool first = arg_bool(a, "first", 1, false), blank = arg_bool(a, "blank", 2, false);
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\n' || s[k] == '\r') {
      lines.push_back(s.substr(start, k - start));
      if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
      start = k + 1;
    }
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t k = 1; k < lines.size(); ++k)
    out += "\n" + ((blank || !lines[k].empty()) ? pad + lines[k] : lines[k]);
  return Value::string(first ? pad + out : out);
}
Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  bool cs = arg_bool(a, "case_sensitive", 0, false);
  const std::string* attribute = arg_str(a, "attribute", 1);
  ValueList out, seen;
  for (const Value& item : in.iterate(v, a.line)) {
    Value key = sort_key(in, item, attribute, cs, a.line);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::make_list(std::move(out));
}
Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  bool reverse = arg_bool(a, "reverse", 0, false), cs = arg_bool(a, "case_sensitive", 1, false);
  const std::string* attribute = arg_str(a, "attribute", 2);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : in.iterate(v, a.line))
    keyed.emplace_back(sort_key(in, item, attribute, cs, a.line), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less_than(y.first, x.first, a.line) : less_than(x.first, y.first, a.line);
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::make_list(std::move(out));
}
Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  if (!v.is_mapping()) fail(a.line, "dictsort: expected a mapping");
  bool cs = arg_bool(a, "case_sensitive", 0, false);
  const std::string* by = arg_str(a, "by", 1);
  bool by_value = by && *by == "value";
  bool reverse = arg_bool(a, "reverse", 2, false);
  ValueList items = *pairs(v).list;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(in, (*x.list)[by_value], nullptr, cs, a.line),
          ky = sort_key(in, (*y.list)[by_value], nullptr, cs, a.line);
    return reverse ? less_than(ky, kx, a.line) : less_than(kx, ky, a.line);
  });
  return Value::make_list(std::move(items));
}
Value f_reverse(Interpreter& in, const Value& v, CallArgs& a) {
  if (v.is_string()) {
    auto cps = code_points(v.s);
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::string(out);
  }
  std::vector<Value> items = in.iterate(v, a.line);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}
Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string* attribute = arg_str(a, "attribute", 0);
  const Value* start = arg(a, "start", 1);
  Value total = start ? *start : Value::integer(0);
  for (const Value& item : in.iterate(v, a.line)) {
    Value x = attribute ? get_path(in, item, *attribute, a.line) : item;
    if (!x.is_number() || !total.is_number()) fail(a.line, "sum: values must be numbers");
    if (x.kind == Value::Kind::kFloat || total.kind == Value::Kind::kFloat) {
      total = Value::number(total.as_double() + x.as_double());
    } else {
      int64_t r, t = total.kind == Value::Kind::kBool ? total.b : total.i;
      if (__builtin_add_overflow(t, x.kind == Value::Kind::kBool ? x.b : x.i, &r)) {
        fail(a.line, "integer overflow");
      }
      total = Value::integer(r);
    }
  }
  return total;
}
Value minmax(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  bool cs = arg_bool(a, "case_sensitive", 0, false);
  const std::string* attribute = arg_str(a, "attribute", 1);
  std::vector<Value> items = in.iterate(v, a.line);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k) {
    Value kb = sort_key(in, items[best], attribute, cs, a.line),
          kk = sort_key(in, items[k], attribute, cs, a.line);
    if (want_max ? less_than(kb, kk, a.line) : less_than(kk, kb, a.line)) best = k;
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) {
  return minmax(in, v, a, false);
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) {
  return minmax(in, v, a, true);
}
Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  if (!v.is_number()) fail(a.line, "round: expected a number");
  int64_t precision = arg_int(a, "precision", 0, 0);
  const std::string* method = arg_str(a, "method", 1);
  double scale = std::pow(10.0, static_cast<double>(precision)), x = v.as_double() * scale;
  double r = !method || *method == "common" ? std::nearbyint(x)
             : *method == "ceil"            ? std::ceil(x)
                                            : std::floor(x);
  if (method && *method != "common" && *method != "ceil" && *method != "floor")
    fail(a.line, "round: unknown method");
  return Value::number(r / scale);
}
Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    bool w = std::isalnum(c) || c == '_' || c >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> kFilters = {
      {"length", f_length},
      {"count", f_length},
      {"trim", f_trim},
      {"upper", f_upper},
      {"lower", f_lower},
      {"capitalize", f_capitalize},
      {"title", f_title},
      {"tojson", f_tojson},
      {"string", f_string},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"first", f_first},
      {"last", f_last},
      {"join", f_join},
      {"default", f_default},
      {"d", f_default},
      {"replace", f_replace},
      {"items", f_items},
      {"list", f_list},
      {"map", f_map},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"safe", f_safe},
      {"escape", f_escape},
      {"e", f_escape},
      {"forceescape", f_escape},
      {"indent", f_indent},
      {"unique", f_unique},
      {"sort", f_sort},
      {"dictsort", f_dictsort},
      {"reverse", f_reverse},
      {"sum", f_sum},
      {"min", f_min},
      {"max", f_max},
      {"round", f_round},
      {"wordcount", f_wordcount},
  };
  return kFilters;
}

// ---- tests ----

bool t_defined(Interpreter&, const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_string(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs&) {
  return v.is_mapping();
}
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
}
bool t_number(Interpreter&, const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_integer(Interpreter&, const Value& v, CallArgs&) {
  return v.kind == Value::Kind::kInt;
}
bool t_float(Interpreter&, const Value& v, CallArgs&) {
  return v.kind == Value::Kind::kFloat;
}
bool t_boolean(Interpreter&, const Value& v, CallArgs&) {
  return v.kind == Value::Kind::kBool;
}
bool t_true(Interpreter&, const Value& v, CallArgs&) {
  return v.kind == Value::Kind::kBool && v.b;
}
bool t_false(Interpreter&, const Value& v, CallArgs&) {
  return v.kind == Value::Kind::kBool && !v.b;
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) {
  return v.kind == Value::Kind::kCallable;
}
const Value& other(const CallArgs& a) {
  if (a.args.empty()) fail(a.line, "test needs an argument");
  return a.args[0];
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
  return equals(v, other(a));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
  return !equals(v, other(a));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return less_than(v, other(a), a.line);
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  return !less_than(other(a), v, a.line);
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return less_than(other(a), v, a.line);
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  return !less_than(v, other(a), a.line);
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  return contains(other(a), v, a.line);
}
bool t_odd(Interpreter&, const Value& v, CallArgs& a) {
  return int_of(v, a.line) % 2 != 0;
}
bool t_even(Interpreter&, const Value& v, CallArgs& a) {
  return int_of(v, a.line) % 2 == 0;
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  int64_t d = int_of(other(a), a.line);
  if (d == 0) fail(a.line, "divisibleby 0");
  return int_of(v, a.line) % d == 0;
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && ascii_case(v.s, false) == v.s && ascii_case(v.s, true) != v.s;
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && ascii_case(v.s, true) == v.s && ascii_case(v.s, false) != v.s;
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = other(a);
  if (v.kind != o.kind) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.kind == Value::Kind::kBool) return v.b == o.b;
  if (v.is_list()) return v.list == o.list;
  if (v.is_dict()) return v.dict == o.dict;
  return false;
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) {
  return false;
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> kTests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"callable", t_callable},
      {"equalto", t_eq},
      {"eq", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"lower", t_lower},
      {"upper", t_upper},
      {"sameas", t_sameas},
      {"escaped", t_escaped},
  };
  return kTests;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) > 0;
}
bool has_test(const std::string& name) {
  return tests().count(name) > 0;
}

Value call_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail(args.line, str_cat("unknown filter '", name, "'"));
  return it->second(in, input, args);
}

bool call_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail(args.line, str_cat("unknown test '", name, "'"));
  return it->second(in, v, args);
}

}  // namespace mtp::chat::jinja
