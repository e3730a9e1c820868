// Helpers shared by the builtins: argument access and Python's string operations.
#include <algorithm>
#include <cmath>

#include "jinja_util.h"

namespace mtp::chat::jinja {
namespace {

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_letter(std::string_view cp) {
  return cp.size() > 1 || std::isalpha(static_cast<unsigned char>(cp[0]));
}
}  // namespace

const Value* arg(const CallArgs& a, std::string_view name, size_t pos) {
  return a.get(name, pos);
}
bool arg_bool(const CallArgs& a, std::string_view name, size_t pos, bool dflt) {
  const Value* v = arg(a, name, pos);
  return v ? truthy(*v) : dflt;
}
const std::string* arg_str(const CallArgs& a, std::string_view name, size_t pos, bool required) {
  const Value* v = arg(a, name, pos);
  if (!v || v->is_none()) {
    if (required) fail(a.line, str_cat("missing argument '", name, "'"));
    return nullptr;
  }
  if (!v->is_string()) fail(a.line, str_cat("argument '", name, "' must be a string, not ", type_name(*v)));
  return &v->s;
}
int64_t arg_int(const CallArgs& a, std::string_view name, size_t pos, int64_t dflt) {
  const Value* v = arg(a, name, pos);
  if (!v || v->is_none()) return dflt;
  if (v->kind == Value::Kind::kInt) return v->i;
  if (v->kind == Value::Kind::kBool) return v->b;
  fail(a.line, str_cat("argument '", name, "' must be an integer, not ", type_name(*v)));
}

// Python's str.upper()/lower() for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (other scripts are
// left as they are; most have no case). Not covered: Greek final sigma in lower(), accented Greek.
std::string case_map(std::string_view cp, bool upper) {
  unsigned char c0 = static_cast<unsigned char>(cp[0]);
  if (cp.size() == 1) {
    char c = static_cast<char>(upper ? std::toupper(c0) : std::tolower(c0));
    return std::string(1, c);
  }
  if (cp.size() != 2) return std::string(cp);
  uint32_t c = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(cp[1]) & 0x3Fu);
  uint32_t r = c;
  if (upper) {
    if (c == 0xDF) return "SS";
    if (c == 0xB5)
      r = 0x39C;
    else if (c >= 0xE0 && c <= 0xFE && c != 0xF7)
      r = c - 0x20;
    else if (c == 0xFF)
      r = 0x178;
    else if (c == 0x131)
      r = 'I';
    else if (c == 0x17F)
      r = 'S';
    else if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
      r = c & 1 ? c - 1 : c;
    else if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
      r = c & 1 ? c : c - 1;
    else if ((c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2))
      r = c - 0x20;
    else if (c == 0x3C2)
      r = 0x3A3;
    else if (c >= 0x430 && c <= 0x44F)
      r = c - 0x20;
    else if (c >= 0x450 && c <= 0x45F)
      r = c - 0x50;
  } else {
    if (c == 0x130) return "i\xCC\x87";
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7)
      r = c + 0x20;
    else if (c == 0x178)
      r = 0xFF;
    else if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
      r = c & 1 ? c : c + 1;
    else if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
      r = c & 1 ? c + 1 : c;
    else if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2)
      r = c + 0x20;
    else if (c >= 0x410 && c <= 0x42F)
      r = c + 0x20;
    else if (c >= 0x400 && c <= 0x40F)
      r = c + 0x50;
  }
  if (r == c) return std::string(cp);
  std::string out;
  put_utf8(out, r);
  return out;
}

std::string ascii_case(const std::string& s, bool upper) {
  std::string out;
  for (std::string_view cp : code_points(s)) out += case_map(cp, upper);
  return out;
}
std::string capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (std::string_view cp : code_points(s)) {
    out += case_map(cp, first);
    first = false;
  }
  return out;
}
// Python's str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
// Jinja's |title instead starts words after whitespace, '-', '(', '{', '[' and '<'.
std::string title_case(const std::string& s, bool jinja_filter) {
  std::string out;
  bool start = true;
  for (std::string_view cp : code_points(s)) {
    bool letter = is_letter(cp);
    out += letter || jinja_filter ? case_map(cp, start) : std::string(cp);
    if (jinja_filter) {
      char c = cp[0];
      start = cp.size() == 1 && (std::isspace(static_cast<unsigned char>(c)) || c == '-' || c == '(' ||
                                 c == '{' || c == '[' || c == '<');
    } else {
      start = !letter;
    }
  }
  return out;
}
// Jinja's attribute getter for map/selectattr/sort: "a.b.0" walks attributes, integer parts index.
Value get_path(Interpreter& in, const Value& v, const std::string& path, int line) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? in.getitem(cur, Value::integer(std::stoll(part)), line)
                 : in.getitem(cur, Value::string(part), line);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

int64_t py_len(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(code_points(v.s).size());
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
      if (!v.is_namespace) return static_cast<int64_t>(v.dict->items.size());
      break;
    default:
      break;
  }
  fail(line, str_cat("object of type '", type_name(v), "' has no len()"));
}

std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> out;
  auto cps = code_points(s);
  size_t k = 0;
  auto space = [&](size_t i) {
    std::string_view cp = cps[i];
    uint32_t c = static_cast<unsigned char>(cp[0]);
    if (cp.size() == 2) c = ((c & 0x1F) << 6) | (cp[1] & 0x3F);
    if (cp.size() == 3) c = ((c & 0x0F) << 12) | ((cp[1] & 0x3F) << 6) | (cp[2] & 0x3F);
    return cp.size() <= 3 && is_py_space(c);
  };
  while (true) {
    while (k < cps.size() && space(k)) ++k;
    if (k >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t begin = static_cast<size_t>(cps[k].data() - s.data());
      out.push_back(py_strip(s.substr(begin), false, true, nullptr));
      break;
    }
    std::string word;
    while (k < cps.size() && !space(k)) word += cps[k++];
    out.push_back(word);
  }
  return out;
}

std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit, int line) {
  if (sep.empty()) fail(line, "empty separator");
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t pos = s.find(sep, start);
    if (pos == std::string::npos) break;
    out.push_back(s.substr(start, pos - start));
    start = pos + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

Value str_list(const std::vector<std::string>& parts) {
  ValueList items;
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::make_list(std::move(items));
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends).
    auto cps = code_points(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cps.size()) out += cps[k];
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t pos = s.find(from, start);
    if (pos == std::string::npos) break;
    out.append(s, start, pos - start);
    out += to;
    start = pos + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

Value pairs(const Value& dict) {
  ValueList items;
  for (const auto& [k, v] : dict.dict->items) items.push_back(Value::make_list({Value::string(k), v}, true));
  return Value::make_list(std::move(items));
}

Value sort_key(Interpreter& in, const Value& v, const std::string* attribute, bool case_sensitive, int line) {
  Value key = attribute ? get_path(in, v, *attribute, line) : v;
  if (!case_sensitive && key.is_string()) return Value::string(ascii_case(key.s, false));
  return key;
}

int64_t int_of(const Value& v, int line) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b;
  fail(line, str_cat("expected an integer, got ", type_name(v)));
}

Value method(const std::string& name, std::function<Value(CallArgs&)> f) {
  return Value::callable(name, [f = std::move(f)](Interpreter&, CallArgs& a) { return f(a); });
}

Value unsupported_method(const std::string& type, const std::string& name) {
  return method(type + "." + name, [type, name](CallArgs& a) -> Value {
    fail(a.line, str_cat("unsupported: ", type, ".", name, "() (templates cannot modify values or use it)"));
  });
}

}  // namespace mtp::chat::jinja
