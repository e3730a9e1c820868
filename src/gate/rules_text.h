// The text of a rules file, in either format, as one JSON value (private to the gate library). A TOML file
// becomes the JSON it spells (tables -> objects, arrays -> arrays, strings, integers, floats, booleans), so a
// TOML file and a JSON file with the same rules have the same canonical form and the same sha256.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace mtp::gate {

// A parsed rules document and, for each element of its "rules" array, the line it starts on (0: unknown),
// so a rule's problem can name its line.
struct RulesDocument {
  nlohmann::json json;
  std::vector<int64_t> rule_lines;
};

// Malformed text is one line "SOURCE:LINE:COLUMN: what is wrong".
Expected<RulesDocument> parse_json_document(const std::string& text, const std::string& source);
// TOML has dates and times, which JSON has not; they are refused with their line, as are NaN and infinities.
Expected<RulesDocument> parse_toml_document(const std::string& text, const std::string& source);

}  // namespace mtp::gate
