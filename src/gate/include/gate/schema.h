// The subset of JSON Schema that tool definitions use (OpenAI `tools[].function.parameters`): "type"
// (one name or a list), "properties", "required", "enum", "items" and "additionalProperties" (a bool or a
// schema). Other keywords are ignored, so a schema using them is checked only on this subset.
#pragma once

#include <string>

#include "gate/gate.h"

namespace mtp::gate {

// Empty when `value` satisfies `schema`; otherwise the first violation as one line naming where it is,
// e.g. "$.unit: 'kelvin' is not one of [\"celsius\",\"fahrenheit\"]".
std::string schema_violation(const Json& schema, const Json& value);

}  // namespace mtp::gate
