#include "gate/schema.h"

#include <algorithm>

#include "base/status.h"

namespace mtp::gate {
namespace {

// JSON Schema's type names; "integer" also accepts a float with no fraction (1.0), as the spec says.
bool has_type(const Json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && v.get<double>() == static_cast<int64_t>(v.get<double>()));
  return true;  // an unknown type name constrains nothing here
}

std::string type_violation(const Json& type, const Json& v, const std::string& at) {
  if (type.is_string())
    return has_type(v, type.get<std::string>())
               ? ""
               : str_cat(at, ": ", v.dump(), " is not of type ", type.dump());
  if (!type.is_array()) return "";
  for (const Json& t : type)
    if (t.is_string() && has_type(v, t.get<std::string>())) return "";
  return str_cat(at, ": ", v.dump(), " is not of any type ", type.dump());
}

std::string violation_at(const Json& schema, const Json& v, const std::string& at);

std::string object_violation(const Json& schema, const Json& v, const std::string& at) {
  const Json empty = Json::object();
  const Json& props =
      schema.contains("properties") && schema["properties"].is_object() ? schema["properties"] : empty;
  if (auto it = schema.find("required"); it != schema.end() && it->is_array()) {
    for (const Json& name : *it)
      if (name.is_string() && !v.contains(name.get<std::string>()))
        return str_cat(at, ": required property '", name.get<std::string>(), "' is missing");
  }
  const auto extra = schema.find("additionalProperties");
  for (const auto& [key, value] : v.items()) {
    const std::string where = str_cat(at, ".", key);
    if (props.contains(key)) {
      if (std::string w = violation_at(props[key], value, where); !w.empty()) return w;
    } else if (extra != schema.end() && extra->is_boolean() && !extra->get<bool>()) {
      return str_cat(where, ": property not allowed (additionalProperties is false)");
    } else if (extra != schema.end() && extra->is_object()) {
      if (std::string w = violation_at(*extra, value, where); !w.empty()) return w;
    }
  }
  return "";
}

std::string violation_at(const Json& schema, const Json& v, const std::string& at) {
  if (!schema.is_object()) return "";  // `true` or a malformed schema: accepts anything
  if (auto it = schema.find("type"); it != schema.end())
    if (std::string w = type_violation(*it, v, at); !w.empty()) return w;
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
    if (std::find(it->begin(), it->end(), v) == it->end())
      return str_cat(at, ": ", v.dump(), " is not one of ", it->dump());
  }
  if (v.is_object()) return object_violation(schema, v, at);
  if (v.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < v.size(); ++i)
      if (std::string w = violation_at(schema["items"], v[i], str_cat(at, "[", i, "]")); !w.empty()) return w;
  }
  return "";
}

}  // namespace

std::string schema_violation(const Json& schema, const Json& value) {
  return violation_at(schema, value, "$");
}

}  // namespace mtp::gate
