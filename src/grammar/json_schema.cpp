#include "grammar/json_schema.h"

#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "base/check.h"

#include "grammar/grammar.h"
#include "json_pattern.h"
#include "number_range.h"

namespace mtp::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The primitive rules, each added to a grammar only when used. Whitespace is bounded (a newline and at most
// 20 blanks between tokens) so a model cannot pad forever; numbers have at most 16 digits per part and a
// two-digit exponent (so every number fits a double).
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> rules = {
      {"space", R"(| " " | "\n" [ \t]{0,20})"},
      {"boolean", R"(("true" | "false") space)"},
      {"null", R"("null" space)"},
      {"integral-part", R"([0] | [1-9] [0-9]{0,15})"},
      {"number", R"("-"? integral-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? space)"},
      {"integer", R"("-"? integral-part space)"},
      {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
      {"string", R"("\"" char* "\"" space)"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" space (string ":" space value ("," space string ":" space value)*)? "}" space)"},
      {"array", R"("[" space (value ("," space value)*)? "]" space)"},
      {"date", R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1]))"},
      {"time",
       R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
      {"date-time", R"(date "T" time)"},
      {"uuid",
       R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
  };
  return rules;
}

// The rules each primitive uses.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> deps = {
      {"boolean", {"space"}},
      {"null", {"space"}},
      {"number", {"integral-part", "space"}},
      {"integer", {"integral-part", "space"}},
      {"string", {"char", "space"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"string", "value", "space"}},
      {"array", {"value", "space"}},
      {"date-time", {"date", "time"}},
  };
  return deps;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> keys = {"title", "description", "default",    "examples", "$schema",
                                             "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
  return keys;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> keys = {"type",
                                             "properties",
                                             "required",
                                             "additionalProperties",
                                             "enum",
                                             "const",
                                             "items",
                                             "minItems",
                                             "maxItems",
                                             "anyOf",
                                             "oneOf",
                                             "allOf",
                                             "$ref",
                                             "$defs",
                                             "definitions",
                                             "format",
                                             "minLength",
                                             "maxLength",
                                             "pattern",
                                             "minimum",
                                             "maximum",
                                             "exclusiveMinimum",
                                             "exclusiveMaximum"};
  return keys;
}

std::string rule_name_from(const std::string& hint) {
  std::string name;
  for (char c : hint) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  return name.empty() ? "schema" : name;
}

class Compiler {
 public:
  // The rules named in `schemas` are the callers'; generated rules never take those names (nor "root").
  explicit Compiler(std::span<const NamedSchema> schemas) : schemas_(schemas) {
    reserved_.insert("root");
    for (const NamedSchema& n : schemas) reserved_.insert(n.rule);
  }

  // Every schema's rule, then the rules they use, one a line.
  Expected<std::string> run() {
    std::string out;
    for (const NamedSchema& n : schemas_) {
      root_ = n.schema;
      refs_.clear();  // "$ref"s resolve within the schema they are in
      auto body = visit(*root_, n.at, n.rule);
      if (!body) return body.status();
      out += n.rule + " ::= " + *body + "\n";
    }
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out;
  }

 private:
  // A GBNF expression matching `schema` (and the whitespace after it); `at` is its JSON pointer for errors.
  Expected<std::string> visit(const Json& schema, const std::string& at, const std::string& hint) {
    struct Level {  // one per schema being compiled, inside each other
      explicit Level(int& d) : d_(++d) {}
      ~Level() { --d_; }
      int& d_;
    } level(depth_);
    if (depth_ > kMaxNesting)
      return invalid_argument("JSON Schema at ", at, ": nested deeper than ", kMaxNesting);
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return invalid_argument("JSON Schema at ", at, ": 'false' matches nothing");
      return use("value");
    }
    if (!schema.is_object())
      return invalid_argument("JSON Schema at ", at, ": expected an object or a boolean");
    for (const auto& [key, v] : schema.items())
      if (!annotations().count(key) && !supported_keywords().count(key))
        return unsupported("unsupported JSON Schema keyword '", key, "' at ", at);
    if (auto it = schema.find("$ref"); it != schema.end()) return reference(*it, at);
    if (auto it = schema.find("allOf"); it != schema.end()) return all_of(schema, *it, at, hint);
    if (auto it = schema.find("const"); it != schema.end())
      return gbnf_literal(it->dump()) + " " + use("space");
    if (auto it = schema.find("enum"); it != schema.end()) return enumeration(*it, at);
    for (const char* key : {"anyOf", "oneOf"})
      if (auto it = schema.find(key); it != schema.end())
        return alternatives(*it, str_cat(at, "/", key), hint);
    if (auto it = schema.find("type"); it != schema.end()) {
      if (it->is_string()) return typed(it->get<std::string>(), schema, at, hint);
      if (!it->is_array() || it->empty())
        return invalid_argument("JSON Schema at ", at, ": 'type' must be a name or a non-empty list");
      std::string out;
      for (const Json& t : *it) {
        if (!t.is_string()) return invalid_argument("JSON Schema at ", at, ": 'type' lists a non-string");
        auto one = typed(t.get<std::string>(), schema, at, hint);
        if (!one) return one.status();
        out += (out.empty() ? "(" : " | ") + *one;
      }
      return out + ")";
    }
    if (schema.contains("properties") || schema.contains("additionalProperties"))
      return typed("object", schema, at, hint);
    if (schema.contains("items")) return typed("array", schema, at, hint);
    if (has_bounds(schema) || schema.contains("pattern")) {  // they constrain numbers or strings only
      auto number = numeric_rule("number", schema, at);
      if (!number) return number.status();
      auto string = string_rule(schema, at);
      if (!string) return string.status();
      std::string out = "(";
      for (const char* other : {"object", "array", "boolean", "null"}) out += use(other) + " | ";
      return out + *number + " | " + *string + ")";
    }
    return use("value");
  }

  // Names a primitive rule (adding it and what it uses).
  std::string use(const std::string& name) {
    if (rules_.count(name)) return name;
    rules_[name] = primitives().at(name);
    if (auto it = primitive_deps().find(name); it != primitive_deps().end())
      for (const std::string& dep : it->second) use(dep);
    return name;
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name = rule_name_from(hint);
    for (int i = 1; rules_.count(name) || primitives().count(name) || reserved_.count(name); ++i)
      name = str_cat(rule_name_from(hint), "-", i);
    rules_[name] = body;
    return name;
  }

  // The schema a "$ref" names: "#", or a name in the root's $defs or definitions.
  Expected<const Json*> resolve(const Json& ref, const std::string& at) const {
    if (!ref.is_string()) return invalid_argument("JSON Schema at ", at, ": '$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (target == "#") return root_;
    for (const char* defs : {"#/$defs/", "#/definitions/"}) {
      const std::string prefix = defs;
      if (target.rfind(prefix, 0) != 0) continue;
      const std::string key = prefix.substr(2, prefix.size() - 3);
      const std::string name = target.substr(prefix.size());
      if (root_->contains(key) && (*root_)[key].is_object() && (*root_)[key].contains(name))
        return &(*root_)[key][name];
    }
    return unsupported("JSON Schema at ", at, ": '$ref' \"", target,
                       "\" is not \"#\" or a name in the root's $defs or definitions");
  }

  Expected<std::string> reference(const Json& ref, const std::string& at) {
    auto resolved = resolve(ref, at);
    if (!resolved) return resolved.status();
    const Json* schema = *resolved;
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    // Named before it is compiled, so a recursive reference finds it.
    const std::string name = new_rule("ref-" + target.substr(target.rfind('/') + 1), "");
    refs_[target] = name;
    auto body = visit(*schema, target, name);
    if (!body) return body.status();
    rules_[name] = *body;
    return name;
  }

  Expected<std::string> enumeration(const Json& values, const std::string& at) {
    if (!values.is_array() || values.empty())
      return invalid_argument("JSON Schema at ", at, ": 'enum' must be a non-empty list");
    std::string out;
    for (const Json& v : values) out += (out.empty() ? "(" : " | ") + gbnf_literal(v.dump());
    return out + ") " + use("space");
  }

  // "allOf" on its own (annotations aside): one schema, as pydantic writes a field's described "$ref", or
  // object schemas (or "$ref"s to them) whose properties and required lists merge, in order, into one closed
  // object (other keys are refused, so every value is also valid under the open originals).
  Expected<std::string> all_of(const Json& schema, const Json& list, const std::string& at,
                               const std::string& hint) {
    if (!list.is_array() || list.empty())
      return invalid_argument("JSON Schema at ", at, ": 'allOf' must be a non-empty list");
    for (const auto& [key, v] : schema.items())
      if (key != "allOf" && key != "$defs" && key != "definitions" && !annotations().count(key))
        return unsupported("JSON Schema at ", at, ": 'allOf' beside '", key, "' (unsupported)");
    if (list.size() == 1) return visit(list[0], at + "/allOf/0", hint);
    Json merged = {{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()}};
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string part_at = str_cat(at, "/allOf/", i);
      const Json* part = &list[i];
      if (part->is_object() && part->contains("$ref")) {
        auto target = resolve((*part)["$ref"], part_at);
        if (!target) return target.status();
        part = *target;
      }
      auto refuse = [&] {
        return unsupported(
            "JSON Schema at ", part_at,
            ": 'allOf' merges object schemas of 'properties' and 'required' only (unsupported)");
      };
      if (!part->is_object()) return refuse();
      for (const auto& [key, v] : part->items()) {
        const bool object_type = key == "type" && v == "object";
        if (!object_type && key != "properties" && key != "required" && !annotations().count(key))
          return refuse();
      }
      const Json props = part->value("properties", Json::object());
      for (const auto& [key, v] : props.items()) {
        if (merged["properties"].contains(key))
          return unsupported("JSON Schema at ", part_at, ": property '", key,
                             "' in two 'allOf' schemas (unsupported)");
        merged["properties"][key] = v;
      }
      const Json required = part->value("required", Json::array());
      for (const Json& r : required) merged["required"].push_back(r);
    }
    return visit(merged, at, hint);
  }

  Expected<std::string> alternatives(const Json& list, const std::string& at, const std::string& hint) {
    if (!list.is_array() || list.empty())
      return invalid_argument("JSON Schema at ", at, ": expected a non-empty list of schemas");
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) {
      auto one = visit(list[i], str_cat(at, "/", i), str_cat(hint, "-", i));
      if (!one) return one.status();
      out += (out.empty() ? "(" : " | ") + *one;
    }
    return out + ")";
  }

  Expected<uint32_t> count(const Json& schema, const char* key, uint32_t fallback, const std::string& at) {
    auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_unsigned() || it->get<uint64_t>() > kMaxRepetition)
      return invalid_argument("JSON Schema at ", at, ": '", key, "' must be an integer from 0 to ",
                              kMaxRepetition);
    return static_cast<uint32_t>(it->get<uint64_t>());
  }

  static std::string bounds(uint32_t lo, uint32_t hi) {
    return hi == UINT32_MAX ? str_cat("{", lo, ",}") : str_cat("{", lo, ",", hi, "}");
  }

  Expected<std::string> typed(const std::string& type, const Json& schema, const std::string& at,
                              const std::string& hint) {
    if (type == "string") return string_rule(schema, at);
    if (type == "number" || type == "integer") return numeric_rule(type, schema, at);
    if (type == "boolean" || type == "null") return use(type);
    if (type == "object") return object_rule(schema, at, hint);
    if (type == "array") return array_rule(schema, at, hint);
    return invalid_argument("JSON Schema at ", at, ": unknown type '", type, "'");
  }

  static bool has_bounds(const Json& schema) {
    for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (schema.contains(key)) return true;
    return false;
  }

  // One side's bound: "minimum"/"maximum", "exclusiveMinimum"/"exclusiveMaximum" (a bound of its own, or
  // draft-04's boolean that makes the other exclusive), the tighter where both bound. Integers round a bound
  // inward to a whole number; numbers take whole-number bounds only (number_range.h says why).
  Expected<std::optional<detail::NumberBound>> bound(const Json& schema, bool lower, bool integers,
                                                     const std::string& at) {
    const char* name = lower ? "minimum" : "maximum";
    const char* ex_name = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    const auto plain = schema.find(name), ex = schema.find(ex_name);
    const bool draft4 = ex != schema.end() && ex->is_boolean();
    if (draft4 && ex->get<bool>() && plain == schema.end())
      return invalid_argument("JSON Schema at ", at, ": '", ex_name, "': true needs '", name, "'");
    std::optional<detail::NumberBound> out;
    auto take = [&](const Json& v, const char* key, bool exclusive) -> Status {
      if (!v.is_number()) return invalid_argument("JSON Schema at ", at, ": '", key, "' must be a number");
      const double d = v.get<double>();
      if (!integers && d != std::floor(d))
        return unsupported("JSON Schema at ", at, ": '", key, "' ", v.dump(),
                           " bounds a number by a fraction (unsupported: whole-number bounds only)");
      // x >= 1.5 is x >= 2 for integers, x > 1.5 is x > 1; and the other way round for upper bounds.
      const double whole = integers ? (lower == exclusive ? std::floor(d) : std::ceil(d)) : d;
      if (!(std::fabs(whole) < 1e15))
        return unsupported("JSON Schema at ", at, ": '", key, "' ", v.dump(), " has more than ",
                           detail::kMaxBoundDigits, " integral digits (unsupported)");
      const detail::NumberBound b{static_cast<int64_t>(whole), exclusive};
      const bool tighter = !out || (lower ? b.value > out->value : b.value < out->value) ||
                           (b.value == out->value && b.exclusive);
      if (tighter) out = b;
      return Status();
    };
    if (plain != schema.end())
      if (Status s = take(*plain, name, draft4 && ex->get<bool>()); !s.ok()) return s;
    if (ex != schema.end() && !draft4)
      if (Status s = take(*ex, ex_name, true); !s.ok()) return s;
    return out;
  }

  Expected<std::string> numeric_rule(const std::string& type, const Json& schema, const std::string& at) {
    if (!has_bounds(schema)) return use(type);
    const bool integers = type == "integer";
    auto lo = bound(schema, true, integers, at);
    if (!lo) return lo.status();
    auto hi = bound(schema, false, integers, at);
    if (!hi) return hi.status();
    const std::string range = detail::number_range(*lo, *hi, integers);
    if (range.empty())
      return invalid_argument("JSON Schema at ", at, ": no ", type, " lies within its bounds");
    return str_cat("(", range, ") ", use("space"));
  }

  Expected<std::string> string_rule(const Json& schema, const std::string& at) {
    if (auto it = schema.find("pattern"); it != schema.end()) {
      if (!it->is_string()) return invalid_argument("JSON Schema at ", at, ": 'pattern' must be a string");
      for (const char* key : {"format", "minLength", "maxLength"})
        if (schema.contains(key))
          return unsupported("JSON Schema at ", at, ": 'pattern' beside '", key, "' (unsupported)");
      auto body = detail::pattern_to_gbnf(it->get<std::string>(), at);
      if (!body) return body.status();
      use("char");
      return str_cat("\"\\\"\" ", *body, body->empty() ? "" : " ", "\"\\\"\" ", use("space"));
    }
    if (auto it = schema.find("format"); it != schema.end()) {
      const std::string format = it->is_string() ? it->get<std::string>() : it->dump();
      if (format != "date" && format != "time" && format != "date-time" && format != "uuid")
        return unsupported("unsupported JSON Schema string format '", format, "' at ", at,
                           " (supported: date, time, date-time, uuid)");
      return str_cat("\"\\\"\" ", use(format), " \"\\\"\" ", use("space"));
    }
    auto lo = count(schema, "minLength", 0, at);
    if (!lo) return lo.status();
    auto hi = count(schema, "maxLength", UINT32_MAX, at);
    if (!hi) return hi.status();
    if (*lo == 0 && *hi == UINT32_MAX) return use("string");
    if (*hi < *lo) return invalid_argument("JSON Schema at ", at, ": maxLength is below minLength");
    use("string");
    return str_cat("\"\\\"\" char", bounds(*lo, *hi), " \"\\\"\" space");
  }

  Expected<std::string> array_rule(const Json& schema, const std::string& at, const std::string& hint) {
    std::string item = use("value");
    if (auto it = schema.find("items"); it != schema.end()) {
      auto compiled = visit(*it, at + "/items", hint + "-item");
      if (!compiled) return compiled.status();
      item = new_rule(hint + "-item", *compiled);
    }
    auto lo = count(schema, "minItems", 0, at);
    if (!lo) return lo.status();
    auto hi = count(schema, "maxItems", UINT32_MAX, at);
    if (!hi) return hi.status();
    if (*hi < *lo) return invalid_argument("JSON Schema at ", at, ": maxItems is below minItems");
    use("space");
    if (*hi == 0) return std::string(R"("[" space "]" space)");
    const std::string rest = str_cat(
        "(\",\" space ", item, ")", bounds(*lo == 0 ? 0 : *lo - 1, *hi == UINT32_MAX ? UINT32_MAX : *hi - 1));
    const std::string items = str_cat(item, " ", rest);
    return str_cat("\"[\" space ", *lo == 0 ? "(" + items + ")?" : items, " \"]\" space");
  }

  Expected<std::string> object_rule(const Json& schema, const std::string& at, const std::string& hint);

  std::span<const NamedSchema> schemas_;
  std::set<std::string> reserved_;
  const Json* root_ = nullptr;  // the schema being compiled
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

// Properties in the schema's order, each `"key" : value`; optional ones may be skipped. first(i) is the rest
// when nothing has been written yet (so no comma before the next pair), after(i) when something has.
Expected<std::string> Compiler::object_rule(const Json& schema, const std::string& at,
                                            const std::string& hint) {
  const Json empty = Json::object();
  const Json& props = schema.contains("properties") ? schema["properties"] : empty;
  if (!props.is_object()) return invalid_argument("JSON Schema at ", at, ": 'properties' must be an object");
  std::set<std::string> required;
  if (auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) return invalid_argument("JSON Schema at ", at, ": 'required' must be a list");
    for (const Json& name : *it) {
      if (!name.is_string() || !props.contains(name.get<std::string>()))
        return unsupported("JSON Schema at ", at, ": required property ", name.dump(),
                           " is not in 'properties' (unsupported)");
      required.insert(name.get<std::string>());
    }
  }
  const Json extra = schema.value("additionalProperties", Json(props.empty()));
  if (props.empty() && extra.is_boolean() && extra.get<bool>()) return use("object");
  use("space");
  std::vector<std::pair<std::string, bool>> pairs;  // (the pair's expression, required)
  for (const auto& [key, sub] : props.items()) {
    auto value = visit(sub, at + "/properties/" + key, hint + "-" + key);
    if (!value) return value.status();
    const std::string value_rule = new_rule(hint + "-" + key, *value);
    pairs.emplace_back(str_cat(gbnf_literal(Json(key).dump()), " space \":\" space ", value_rule),
                       required.count(key) > 0);
  }
  std::string extra_pair;
  if (!(extra.is_boolean() && !extra.get<bool>())) {
    auto value = extra.is_boolean() ? Expected<std::string>(use("value"))
                                    : visit(extra, at + "/additionalProperties", hint + "-extra");
    if (!value) return value.status();
    extra_pair = new_rule(hint + "-extra-kv", str_cat(use("string"), " \":\" space ", *value));
  }
  std::vector<std::string> after(pairs.size() + 1);  // after[i]: pairs i.. once something has been written
  after[pairs.size()] = extra_pair.empty() ? "" : str_cat("(\",\" space ", extra_pair, ")*");
  for (size_t i = pairs.size(); i-- > 0;) {
    const std::string one = str_cat("\",\" space ", pairs[i].first);
    after[i] = (pairs[i].second ? one : "(" + one + ")?") + " " + after[i + 1];
  }
  std::string first = extra_pair.empty() ? "" : str_cat("(", extra_pair, " ", after[pairs.size()], ")?");
  for (size_t i = pairs.size(); i-- > 0;) {
    const std::string with = str_cat(pairs[i].first, " ", after[i + 1]);
    first = pairs[i].second ? with : str_cat("(", with, " | ", first, ")");
  }
  return new_rule(hint + "-object", str_cat("\"{\" space ", first, " \"}\" space"));
}

}  // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += str_cat("\\x", "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

Expected<std::string> json_schema_rules(std::span<const NamedSchema> schemas) {
  for (const NamedSchema& n : schemas)
    MTP_CHECK(!n.rule.empty() && rule_name_from(n.rule) == n.rule && n.schema != nullptr,
              "a schema's rule needs a GBNF name");
  return Compiler(schemas).run();
}

Expected<std::string> json_schema_to_gbnf(const Json& schema) {
  const NamedSchema root{"root", &schema, "#"};
  auto text = json_schema_rules({&root, 1});
  if (!text) return text.status();
  auto check = parse_gbnf(*text);
  if (!check)
    return Status(StatusCode::kInternal, "compiled grammar does not parse: " + check.status().message());
  return text;
}

Expected<std::string> raw_pattern_gbnf(std::string_view pattern, const std::string& at) {
  return detail::pattern_to_gbnf(pattern, at, true);
}

std::string json_object_gbnf() {
  return *json_schema_to_gbnf(Json{{"type", "object"}});
}

}  // namespace mtp::grammar
