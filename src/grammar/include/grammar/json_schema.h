// JSON Schema -> GBNF (grammar.h), for structured output. Supported: "type" (a name or a list), "properties"
// with "required" (properties come in the schema's order; optional ones may be left out),
// "additionalProperties" (false or absent: no other keys; true or a schema: other keys after the declared
// ones), "enum", "const", "items" with "minItems"/"maxItems", "anyOf"/"oneOf" (both as "any of": a value
// matching several branches is accepted), "$ref" to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion
// allowed), string "minLength"/ "maxLength" and "format" date, time, date-time and uuid. Annotations (title,
// description, default, examples, $schema, $id, $comment) are ignored. Anything else is an error naming the
// keyword and where it is.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace mtp::grammar {

// Properties keep the schema's order, so the schema must be parsed as an ordered_json.
Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// Any JSON object (OpenAI's response_format {"type": "json_object"}), as GBNF.
std::string json_object_gbnf();

}  // namespace mtp::grammar
