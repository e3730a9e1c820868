// Helpers shared by the gate tests: rules files parsed or refused, and JSON-schema validity.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "gate/gate.h"
#include "gate/schema.h"

namespace mtp::gate::testing {

// A rules file holding one rule with these fields (text of JSON members, without braces).
inline std::string rule_json(const std::string& fields) {
  return R"({"gate": "g", "rules": [{"id": "r", )" + fields + "}]}";
}

// The rules of `text`, which must parse.
inline Rules rules_of(const std::string& text) {
  auto r = parse_rules(text, "rules.json");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : Rules{};
}

// The message refusing `text`, which must not parse.
inline std::string parse_error(const std::string& text) {
  auto r = parse_rules(text, "rules.json");
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

// The message refusing a rules file of one rule with these fields.
inline std::string rule_error(const std::string& fields) {
  return parse_error(rule_json(fields));
}

// Whether the JSON `value` satisfies the JSON schema `schema`.
inline bool valid(const char* schema, const char* value) {
  return schema_violation(Json::parse(schema), Json::parse(value)).empty();
}

}  // namespace mtp::gate::testing
