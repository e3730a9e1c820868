#include "gate/schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

namespace mtp::gate {
namespace {

// A $ref chain this long without consuming the value is a loop ({"$ref": "#"} at the root).
constexpr int kMaxRefDepth = 64;
// libstdc++'s std::regex recurses per character matched, so a long enough string overflows the stack; a
// string longer than this is reported as not checked against a pattern or format rather than matched.
constexpr size_t kMaxRegexInput = 4096;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k;
}

const std::set<std::string>& checked_keywords() {
  // clang-format off
  static const std::set<std::string> k = {
      "type", "nullable", "enum", "const",
      "properties", "required", "additionalProperties", "minProperties", "maxProperties",
      "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
      "minLength", "maxLength", "pattern", "format",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
      "$ref", "allOf", "anyOf", "oneOf", "not"};
  // clang-format on
  return k;
}

const std::map<std::string, std::regex>& formats() {
  static const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  static const std::string time =
      R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::map<std::string, std::regex> f = {
      {"date", std::regex(date)},
      {"time", std::regex(time)},
      {"date-time", std::regex(date + "[tT]" + time)},
      {"uuid", std::regex(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})")},
      {"email", std::regex(R"([^@\s]+@[^@\s.]+(\.[^@\s.]+)+)")},
      {"ipv4", std::regex(R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))")},
      {"uri", std::regex(R"([A-Za-z][A-Za-z0-9+.-]*:[^\s]*)")},
  };
  return f;
}

bool known_type(const std::string& t) {
  return t == "object" || t == "array" || t == "string" || t == "number" || t == "integer" ||
         t == "boolean" || t == "null";
}

// "integer" also accepts a float with no fraction (1.0), as the specification says.
bool has_type(const Json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
}

// The schema a local $ref names: "#" (the root) or "#/a/b" (a JSON pointer into the document); null when it
// names nothing there.
const Json* resolve(const Json& root, const std::string& ref) {
  if (ref == "#") return &root;
  if (ref.rfind("#/", 0) != 0) return nullptr;
  try {
    const Json::json_pointer ptr(ref.substr(1));
    return root.contains(ptr) ? &root.at(ptr) : nullptr;
  } catch (const Json::exception&) {
    return nullptr;
  }
}

// ---- check_schema: the schema itself --------------------------------------------------------------------

class SchemaChecker {
 public:
  explicit SchemaChecker(const Json& root) : root_(root) {}
  Status check(const Json& s, const std::string& at);

 private:
  Status check_keyword(const std::string& key, const Json& value, const std::string& at);
  Status check_list(const Json& value, const std::string& at, bool allow_empty);
  const Json& root_;
  std::set<std::string> refs_checked_;
};

Status SchemaChecker::check_list(const Json& value, const std::string& at, bool allow_empty) {
  if (!value.is_array() || (!allow_empty && value.empty()))
    return invalid_argument("JSON Schema at ", at, ": expected a non-empty array of schemas");
  for (size_t i = 0; i < value.size(); ++i) MTP_RETURN_IF_ERROR(check(value[i], str_cat(at, "/", i)));
  return Status::Ok();
}

Status SchemaChecker::check_keyword(const std::string& key, const Json& v, const std::string& parent) {
  const std::string at = str_cat(parent, "/", key);
  auto bad = [&](const char* what) { return invalid_argument("JSON Schema at ", at, ": ", what); };
  if (key == "type") {
    const Json types = v.is_array() ? v : Json::array({v});
    for (const Json& t : types)
      if (!t.is_string() || !known_type(t.get<std::string>()))
        return invalid_argument("JSON Schema at ", at, ": unknown type ", t.dump());
  } else if (key == "enum" || key == "required") {
    if (!v.is_array()) return bad("expected an array");
    if (key == "required" && !std::all_of(v.begin(), v.end(), [](const Json& n) { return n.is_string(); }))
      return bad("expected an array of property names");
  } else if (key == "properties" || key == "$defs" || key == "definitions") {
    if (!v.is_object()) return bad("expected an object of schemas");
    for (const auto& [name, sub] : v.items()) MTP_RETURN_IF_ERROR(check(sub, str_cat(at, "/", name)));
  } else if (key == "additionalProperties" || key == "not") {
    return check(v, at);
  } else if (key == "items") {
    return v.is_array() ? check_list(v, at, true) : check(v, at);
  } else if (key == "prefixItems") {
    return check_list(v, at, true);
  } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
    return check_list(v, at, false);
  } else if (key.rfind("min", 0) == 0 || key.rfind("max", 0) == 0) {
    const bool count = key != "minimum" && key != "maximum";  // minLength, maxItems, ...
    if (count ? !v.is_number_unsigned() : !v.is_number())
      return bad(count ? "expected a non-negative integer" : "expected a number");
  } else if (key == "exclusiveMinimum" || key == "exclusiveMaximum") {
    if (!v.is_number() && !v.is_boolean()) return bad("expected a number (or draft-04's boolean)");
  } else if (key == "multipleOf") {
    if (!v.is_number() || !(v.get<double>() > 0)) return bad("expected a positive number");
  } else if (key == "uniqueItems" || key == "nullable") {
    if (!v.is_boolean()) return bad("expected a boolean");
  } else if (key == "pattern") {
    if (!v.is_string()) return bad("expected a string");
    try {
      std::regex(v.get<std::string>(), std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      return invalid_argument("JSON Schema at ", at, ": ", v.dump(), " is not a regular expression");
    }
  } else if (key == "format") {
    if (!v.is_string() || !formats().contains(v.get<std::string>()))
      return unsupported("unsupported JSON Schema string format ", v.dump(), " at ", parent,
                         " (supported: date, date-time, email, ipv4, time, uri, uuid)");
  } else if (key == "$ref") {
    const Json* target = v.is_string() ? resolve(root_, v.get<std::string>()) : nullptr;
    if (target == nullptr)
      return invalid_argument("JSON Schema at ", at, ": ", v.dump(),
                              " is not \"#\" or a JSON pointer to a schema in this document");
    if (refs_checked_.insert(v.get<std::string>()).second) return check(*target, v.get<std::string>());
  }
  return Status::Ok();
}

Status SchemaChecker::check(const Json& s, const std::string& at) {
  if (s.is_boolean()) return Status::Ok();
  if (!s.is_object()) return invalid_argument("JSON Schema at ", at, ": a schema is an object or a boolean");
  for (const auto& [key, value] : s.items()) {
    if (!checked_keywords().contains(key) && !annotation_keywords().contains(key))
      return unsupported("unsupported JSON Schema keyword '", key, "' at ", at);
    if (key == "$defs" || key == "definitions" || checked_keywords().contains(key))
      MTP_RETURN_IF_ERROR(check_keyword(key, value, at));
  }
  if (s.contains("minimum") && s.contains("maximum") &&
      s["minimum"].get<double>() > s["maximum"].get<double>())
    return invalid_argument("JSON Schema at ", at, ": maximum is below minimum");
  return Status::Ok();
}

// ---- schema_violation: a value against a checked schema -------------------------------------------------

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class Validator {
 public:
  explicit Validator(const Json& root) : root_(root) {}
  std::string violation(const Json& s, const Json& v, const std::string& at, int depth = 0) const;

 private:
  std::string combinator_violation(const Json& s, const Json& v, const std::string& at, int depth) const;
  std::string object_violation(const Json& s, const Json& v, const std::string& at) const;
  std::string array_violation(const Json& s, const Json& v, const std::string& at) const;
  static std::string string_violation(const Json& s, const std::string& v, const std::string& at);
  static std::string number_violation(const Json& s, double v, const std::string& at);
  const Json& root_;
};

std::string type_violation(const Json& s, const Json& v, const std::string& at) {
  if (!s.contains("type")) return "";
  if (v.is_null() && s.value("nullable", false)) return "";
  const Json& type = s["type"];
  const Json types = type.is_array() ? type : Json::array({type});
  for (const Json& t : types)
    if (has_type(v, t.get<std::string>())) return "";
  return str_cat(at, ": ", v.dump(), " is not of type ", type.dump());
}

std::string Validator::combinator_violation(const Json& s, const Json& v, const std::string& at,
                                            int depth) const {
  if (auto it = s.find("allOf"); it != s.end())
    for (const Json& sub : *it)
      if (std::string w = violation(sub, v, at, depth); !w.empty()) return w;
  if (auto it = s.find("anyOf"); it != s.end()) {
    std::string first;
    for (const Json& sub : *it) {
      std::string w = violation(sub, v, at, depth);
      if (w.empty()) return "";
      if (first.empty()) first = w;
    }
    return str_cat(at, ": matches none of anyOf's ", it->size(), " schemas (the first: ", first, ")");
  }
  if (auto it = s.find("oneOf"); it != s.end()) {
    size_t matched = 0;
    for (const Json& sub : *it) matched += violation(sub, v, at, depth).empty();
    if (matched != 1) return str_cat(at, ": matches ", matched, " of oneOf's schemas, not exactly one");
  }
  if (auto it = s.find("not"); it != s.end() && violation(*it, v, at, depth).empty())
    return str_cat(at, ": ", v.dump(), " matches the schema under 'not'");
  return "";
}

std::string Validator::object_violation(const Json& s, const Json& v, const std::string& at) const {
  const Json empty = Json::object();
  const Json& props = s.contains("properties") ? s["properties"] : empty;
  for (const Json& name : s.value("required", Json::array()))
    if (!v.contains(name.get<std::string>()))
      return str_cat(at, ": required property '", name.get<std::string>(), "' is missing");
  if (v.size() < s.value("minProperties", size_t{0}) || v.size() > s.value("maxProperties", SIZE_MAX))
    return str_cat(at, ": ", v.size(), " properties, outside minProperties/maxProperties");
  const auto extra = s.find("additionalProperties");
  for (const auto& [key, value] : v.items()) {
    const std::string where = str_cat(at, ".", key);
    std::string w;
    if (props.contains(key)) {
      w = violation(props[key], value, where);
    } else if (extra != s.end() && extra->is_boolean() && !extra->get<bool>()) {
      w = str_cat(where, ": property not allowed (additionalProperties is false)");
    } else if (extra != s.end()) {
      w = violation(*extra, value, where);
    }
    if (!w.empty()) return w;
  }
  return "";
}

std::string Validator::array_violation(const Json& s, const Json& v, const std::string& at) const {
  if (v.size() < s.value("minItems", size_t{0}))
    return str_cat(at, ": ", v.size(), " items, fewer than minItems ", s["minItems"].dump());
  if (v.size() > s.value("maxItems", SIZE_MAX))
    return str_cat(at, ": ", v.size(), " items, more than maxItems ", s["maxItems"].dump());
  // Positional schemas: prefixItems, or draft-07's list form of items; then items for the rest.
  const Json none = Json::array();
  const Json& prefix = s.contains("prefixItems")                      ? s["prefixItems"]
                       : s.contains("items") && s["items"].is_array() ? s["items"]
                                                                      : none;
  const Json* rest = s.contains("items") && !s["items"].is_array() ? &s["items"] : nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json* sub = i < prefix.size() ? &prefix[i] : rest;
    if (sub == nullptr) continue;
    if (std::string w = violation(*sub, v[i], str_cat(at, "[", i, "]")); !w.empty()) return w;
  }
  if (s.value("uniqueItems", false))
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = i + 1; j < v.size(); ++j)
        if (v[i] == v[j]) return str_cat(at, ": items ", i, " and ", j, " are equal (uniqueItems)");
  return "";
}

std::string Validator::string_violation(const Json& s, const std::string& v, const std::string& at) {
  const size_t n = code_points(v);
  if (n < s.value("minLength", size_t{0}))
    return str_cat(at, ": ", n, " characters, fewer than minLength ", s["minLength"].dump());
  if (n > s.value("maxLength", SIZE_MAX))
    return str_cat(at, ": ", n, " characters, more than maxLength ", s["maxLength"].dump());
  const bool regex_checked = s.contains("pattern") || s.contains("format");
  if (regex_checked && v.size() > kMaxRegexInput)
    return str_cat(at, ": a string of ", v.size(),
                   " bytes is not checked against a pattern or format (at most ", kMaxRegexInput, ")");
  if (auto it = s.find("pattern"); it != s.end()) {
    if (!std::regex_search(v, std::regex(it->get<std::string>(), std::regex::ECMAScript)))
      return str_cat(at, ": ", Json(v).dump(), " does not match the pattern ", it->dump());
  }
  if (auto it = s.find("format"); it != s.end()) {
    if (!std::regex_match(v, formats().at(it->get<std::string>())))
      return str_cat(at, ": ", Json(v).dump(), " is not a valid ", it->get<std::string>());
  }
  return "";
}

// Draft-04 writes exclusiveMinimum: true beside minimum; later drafts give the exclusive bound itself.
std::string Validator::number_violation(const Json& s, double v, const std::string& at) {
  for (const bool lower : {true, false}) {
    const Json ex = s.value(lower ? "exclusiveMinimum" : "exclusiveMaximum", Json());
    const std::string name = lower ? "minimum" : "maximum";
    auto outside = [&](double bound, bool strict) {
      return lower ? (strict ? v <= bound : v < bound) : (strict ? v >= bound : v > bound);
    };
    if (s.contains(name) && outside(s[name].get<double>(), ex.is_boolean() && ex.get<bool>()))
      return str_cat(at, ": ", v, " is outside the ", ex.is_boolean() && ex.get<bool>() ? "exclusive " : "",
                     name, " ", s[name].get<double>());
    if (ex.is_number() && outside(ex.get<double>(), true))
      return str_cat(at, ": ", v, " is outside the exclusive ", name, " ", ex.get<double>());
  }
  if (auto it = s.find("multipleOf"); it != s.end()) {
    const double q = v / it->get<double>();
    if (std::abs(q - std::round(q)) > 1e-9 * std::max(1.0, std::abs(q)))
      return str_cat(at, ": ", v, " is not a multiple of ", it->get<double>());
  }
  return "";
}

std::string Validator::violation(const Json& s, const Json& v, const std::string& at, int depth) const {
  if (s.is_boolean())
    return s.get<bool>() ? "" : str_cat(at, ": no value is allowed here (the schema is false)");
  if (auto it = s.find("$ref"); it != s.end()) {
    if (depth >= kMaxRefDepth) return str_cat(at, ": $ref nests more than ", kMaxRefDepth, " deep (a loop)");
    if (std::string w = violation(*resolve(root_, it->get<std::string>()), v, at, depth + 1); !w.empty())
      return w;
  }
  if (std::string w = type_violation(s, v, at); !w.empty()) return w;
  if (auto it = s.find("enum"); it != s.end() && std::find(it->begin(), it->end(), v) == it->end())
    return str_cat(at, ": ", v.dump(), " is not one of ", it->dump());
  if (auto it = s.find("const"); it != s.end() && *it != v)
    return str_cat(at, ": ", v.dump(), " is not the constant ", it->dump());
  if (std::string w = combinator_violation(s, v, at, depth); !w.empty()) return w;
  if (v.is_object()) return object_violation(s, v, at);
  if (v.is_array()) return array_violation(s, v, at);
  if (v.is_string()) return string_violation(s, v.get<std::string>(), at);
  if (v.is_number()) return number_violation(s, v.get<double>(), at);
  return "";
}

}  // namespace

Status check_schema(const Json& schema) {
  return SchemaChecker(schema).check(schema, "#");
}

std::string schema_violation(const Json& schema, const Json& value) {
  if (Status s = check_schema(schema); !s.ok()) return str_cat("$: not validated: ", s.message());
  return Validator(schema).violation(schema, value, "$");
}

}  // namespace mtp::gate
