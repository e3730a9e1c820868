// JSON Schema -> GBNF (grammar.h), for structured output. Supported: "type" (a name or a list), "properties"
// with "required" (properties come in the schema's order; optional ones may be left out),
// "additionalProperties" (false or absent: no other keys; true or a schema: other keys after the declared
// ones), "enum", "const", "items" with "minItems"/"maxItems", "anyOf"/"oneOf" (both as "any of": a value
// matching several branches is accepted), "allOf" alone (of one schema, or of object schemas whose
// properties merge), "$ref" to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed), string
// "minLength"/"maxLength", "format" date, time, date-time and uuid, and "pattern" (the ECMAScript subset of
// src/grammar's json_pattern.h), and "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum" (on numbers
// whole-number bounds only; src/grammar's number_range.h says how they stay exact). Annotations (title,
// description, default, examples, $schema, $id, $comment) are ignored. Anything else is an error naming the
// keyword and where it is.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace mtp::grammar {

// Properties keep the schema's order, so the schema must be parsed as an ordered_json.
Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// Several schemas in one grammar, for a caller that writes its own `root` around JSON values (a tool call in
// a chat template's syntax): schemas[i]'s values match the rule named schemas[i].rule (a GBNF name: letters,
// digits, '-'), the rules they use are shared, and each schema's "$ref"s resolve within it. `at` is where
// the schema is, for errors ("#" for a whole document). The rules come one a line, without a root.
struct NamedSchema {
  std::string rule;
  const nlohmann::ordered_json* schema = nullptr;
  std::string at = "#";
};
Expected<std::string> json_schema_rules(std::span<const NamedSchema> schemas);

// A GBNF expression for raw text (every character as itself, none of them '<') that a JSON Schema "pattern"
// matches: a tool call's parameter value written between markup; `at` names the schema in errors.
Expected<std::string> raw_pattern_gbnf(std::string_view pattern, const std::string& at);

// A GBNF string literal for `text` (UTF-8 kept; quotes, backslashes and control bytes escaped).
std::string gbnf_literal(std::string_view text);

// Any JSON object (OpenAI's response_format {"type": "json_object"}), as GBNF.
std::string json_object_gbnf();

}  // namespace mtp::grammar
