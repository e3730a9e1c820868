// A JSON Schema validator for what tool definitions use in practice (OpenAI `tools[].function.parameters`):
//   structure    type (a name or a list), nullable, enum, const, properties, required,
//                additionalProperties (a bool or a schema), minProperties, maxProperties,
//                items (a schema, or a list: positions), prefixItems, minItems, maxItems, uniqueItems
//   strings      minLength, maxLength (in code points), pattern (ECMAScript, unanchored), format (date, time,
//                date-time, uuid, email, ipv4, uri)
//   numbers      minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number, or draft-04's boolean),
//                multipleOf
//   combinators  $ref (local: "#" or a JSON pointer into the document, e.g. "#/$defs/point"), $defs and
//                definitions, allOf, anyOf, oneOf, not
//   annotations  title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
//                writeOnly (not checked: they constrain nothing)
// Any other keyword is reported, never passed over: check_schema names it, and schema_violation reports a
// value it would have to judge by it as not validated.
#pragma once

#include <string>

#include "base/status.h"
#include "gate/gate.h"

namespace mtp::gate {

// Ok when every keyword of `schema` and of its subschemas is one listed above with a well-formed value, and
// every $ref resolves; otherwise the first problem as one line naming where it is, e.g.
// "unsupported JSON Schema keyword 'patternProperties' at #/properties/tags".
Status check_schema(const Json& schema);

// Empty when `value` satisfies `schema`; otherwise the first violation as one line naming where it is,
// e.g. "$.unit: \"kelvin\" is not one of [\"celsius\",\"fahrenheit\"]". A schema that check_schema refuses
// gives that problem as the violation.
std::string schema_violation(const Json& schema, const Json& value);

}  // namespace mtp::gate
