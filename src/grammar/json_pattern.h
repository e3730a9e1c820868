// GBNF for JSON Schema's "pattern": the JSON string bodies (the text between the quotes, as written in the
// JSON document) whose decoded value an ECMAScript regular expression matches. As in JSON Schema the match is
// a search: a pattern without a leading '^' may have any characters before its match, one without a trailing
// '$' any after it.
//
// Supported: literals; '.' (any character but a line break); classes [...] and [^...] with ASCII ranges;
// \d \w \s and their negations, in classes too; escaped punctuation and \t \n \r \f \v \0 \xHH \uHHHH (ASCII
// only); groups (...), (?:...) and (?<name>...); '|'; the quantifiers * + ? {n} {n,} {n,m} (a lazy '?' after
// one changes nothing here); '^' at the start and '$' at the end (with no top-level '|' beside them).
// Refused with the reason: lookarounds, backreferences, word boundaries, \p{...}, anchors elsewhere, and
// non-ASCII characters in the pattern (a non-ASCII character in the value is matched by '.', [^...] and the
// negated escapes).
//
// Within the match each character is written as itself, but '"' and '\' (escaped), the control characters
// (\b \t \n \f \r, or \u00XX in lower case) and DEL (\u007f); the other escapes (\/, \u0041) are not written
// there. Characters before or after the match of an unanchored pattern are any JSON string characters.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace mtp::grammar::detail {

// A GBNF expression for the string body (without the quotes), using the JSON Schema compiler's `char` rule;
// `at` names the schema in errors. With `raw`, for a tool call's raw parameter value: every character written
// as itself, and none is '<' (which would open the markup around the value).
Expected<std::string> pattern_to_gbnf(std::string_view pattern, const std::string& at, bool raw = false);

}  // namespace mtp::grammar::detail
