// The tool-call probe's JSON Schema validator beyond the basic keywords: $ref and $defs, the combinators,
// enum of objects, string, array and number bounds, formats; and that a keyword it does not check is
// reported (by check_schema, by the validator, and by the scenarios file) instead of passed over.
#include <gtest/gtest.h>

#include "gate/schema.h"
#include "gate/tool_probe.h"
#include "rules_fixture.h"

namespace mtp::gate {
namespace {

using mtp::gate::testing::valid;
std::string violation(const char* schema, const char* value) {
  return schema_violation(Json::parse(schema), Json::parse(value));
}
std::string schema_error(const char* schema) {
  const Status s = check_schema(Json::parse(schema));
  return s.ok() ? "accepted" : s.message();
}

TEST(ToolSchemaMore, RefsIntoDefsAndDefinitionsWithRecursion) {
  const char* tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
      "$ref": "#/$defs/node"})";
  EXPECT_TRUE(valid(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
  EXPECT_EQ(violation(tree, R"({"v": 1, "kids": [{"v": 2}, {"kids": []}]})"),
            "$.kids[1]: required property 'v' is missing");
  const char* points = R"({"definitions": {"pt": {"type": "array", "items": {"type": "number"}, "minItems": 2,
      "maxItems": 2}}, "type": "object", "properties": {"from": {"$ref": "#/definitions/pt"}}})";
  EXPECT_TRUE(valid(points, R"({"from": [1, 2.5]})"));
  EXPECT_EQ(violation(points, R"({"from": [1]})"), "$.from: 1 items, fewer than minItems 2");
  // A $ref loop that never consumes the value is reported, not followed forever.
  EXPECT_NE(violation(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})", "1").find("a loop"),
            std::string::npos);
}

TEST(ToolSchemaMore, Combinators) {
  const char* any = R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]})";
  EXPECT_TRUE(valid(any, "7"));
  EXPECT_TRUE(valid(any, R"("abc")"));
  EXPECT_EQ(violation(any, R"("abcd")"),
            R"($: matches none of anyOf's 2 schemas (the first: $: "abcd" is not of type "integer"))");
  const char* one = R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})";
  EXPECT_TRUE(valid(one, "1.5"));
  EXPECT_EQ(violation(one, "2"), "$: matches 2 of oneOf's schemas, not exactly one");
  const char* all = R"({"allOf": [{"type": "string"}, {"minLength": 2}]})";
  EXPECT_TRUE(valid(all, R"("ab")"));
  EXPECT_FALSE(valid(all, R"("a")"));
  EXPECT_FALSE(valid(R"({"not": {"type": "null"}})", "null"));
  EXPECT_TRUE(valid(R"({"not": {"type": "null"}})", "0"));
}

TEST(ToolSchemaMore, EnumOfObjectsConstAndNullable) {
  const char* e = R"({"enum": [{"unit": "c"}, [1, 2], null]})";
  EXPECT_TRUE(valid(e, R"({"unit": "c"})"));
  EXPECT_TRUE(valid(e, "[1, 2]"));
  EXPECT_FALSE(valid(e, R"({"unit": "f"})"));
  EXPECT_FALSE(valid(e, "[2, 1]"));
  EXPECT_TRUE(valid(R"({"const": {"a": 1}})", R"({"a": 1.0})"));
  EXPECT_FALSE(valid(R"({"const": {"a": 1}})", R"({"a": 2})"));
  EXPECT_TRUE(valid(R"({"type": "string", "nullable": true})", "null"));
  EXPECT_FALSE(valid(R"({"type": "string"})", "null"));
}

TEST(ToolSchemaMore, StringBoundsPatternsAndFormats) {
  const char* name = R"({"type": "string", "minLength": 2, "maxLength": 4})";
  EXPECT_TRUE(valid(name, R"("\u00e9t\u00e9")"));  // 4 code points, 6 bytes
  EXPECT_EQ(violation(name, R"("a")"), "$: 1 characters, fewer than minLength 2");
  EXPECT_FALSE(valid(name, R"("abcde")"));
  const char* code = R"({"type": "string", "pattern": "^[A-Z]{3}$"})";
  EXPECT_TRUE(valid(code, R"("EUR")"));
  EXPECT_EQ(violation(code, R"("eur")"), R"($: "eur" does not match the pattern "^[A-Z]{3}$")");
  EXPECT_TRUE(valid(R"({"pattern": "b"})", R"("abc")"));  // unanchored, as ECMAScript's search
  // A string too long to match safely (std::regex recurses per character) is reported, not matched.
  const Json long_uri = "https://example.com/" + std::string(100000, 'a');
  EXPECT_EQ(schema_violation(Json::parse(R"({"format": "uri"})"), long_uri),
            "$: a string of 100020 bytes is not checked against a pattern or format (at most 4096)");
  const std::pair<const char*, std::pair<const char*, const char*>> cases[] = {
      {"date", {R"("2026-12-05")", R"("2026-13-05")"}},
      {"time", {R"("13:20:00Z")", R"("25:00:00Z")"}},
      {"date-time", {R"("2026-12-05T13:20:00+01:00")", R"("2026-12-05 13:20")"}},
      {"uuid", {R"("123e4567-e89b-12d3-a456-426614174000")", R"("123e4567")"}},
      {"email", {R"("a.b@example.com")", R"("a.b@")"}},
      {"ipv4", {R"("192.168.0.1")", R"("256.1.1.1")"}},
      {"uri", {R"("https://example.com/x")", R"("example dot com")"}},
  };
  for (const auto& [format, values] : cases) {
    const std::string schema = std::string(R"({"type": "string", "format": ")") + format + "\"}";
    EXPECT_TRUE(valid(schema.c_str(), values.first)) << format;
    EXPECT_FALSE(valid(schema.c_str(), values.second)) << format;
  }
}

TEST(ToolSchemaMore, ArrayAndNumberBounds) {
  const char* tags = R"({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2,
      "uniqueItems": true})";
  EXPECT_TRUE(valid(tags, R"(["a", "b"])"));
  EXPECT_FALSE(valid(tags, "[]"));
  EXPECT_EQ(violation(tags, R"(["a", "b", "c"])"), "$: 3 items, more than maxItems 2");
  EXPECT_EQ(violation(tags, R"(["a", "a"])"), "$: items 0 and 1 are equal (uniqueItems)");
  const char* pair = R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})";
  EXPECT_TRUE(valid(pair, R"(["a", 1])"));
  EXPECT_FALSE(valid(pair, R"([1, "a"])"));
  EXPECT_FALSE(valid(pair, R"(["a", 1, 2])"));
  const char* pct = R"({"type": "number", "minimum": 0, "maximum": 100})";
  EXPECT_TRUE(valid(pct, "0"));
  EXPECT_TRUE(valid(pct, "100"));
  EXPECT_EQ(violation(pct, "-1"), "$: -1 is outside the minimum 0");
  EXPECT_FALSE(valid(pct, "100.5"));
  EXPECT_FALSE(valid(R"({"exclusiveMinimum": 0})", "0"));
  EXPECT_TRUE(valid(R"({"exclusiveMinimum": 0})", "0.1"));
  EXPECT_FALSE(valid(R"({"minimum": 0, "exclusiveMinimum": true})", "0"));  // draft-04
  EXPECT_FALSE(valid(R"({"exclusiveMaximum": 10})", "10"));
  EXPECT_TRUE(valid(R"({"multipleOf": 0.5})", "2.5"));
  EXPECT_FALSE(valid(R"({"multipleOf": 0.5})", "2.4"));
  EXPECT_FALSE(valid(R"({"type": "object", "maxProperties": 1})", R"({"a": 1, "b": 2})"));
}

TEST(ToolSchemaMore, UnsupportedKeywordsAreReportedNotPassed) {
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"tags": {"patternProperties": {}}}})"),
            "unsupported JSON Schema keyword 'patternProperties' at #/properties/tags");
  EXPECT_EQ(schema_error(R"({"type": "string", "format": "hostname"})"),
            "unsupported JSON Schema string format \"hostname\" at # (supported: date, date-time, email, "
            "ipv4, time, uri, uuid)");
  EXPECT_EQ(schema_error(R"({"type": "widget"})"), "JSON Schema at #/type: unknown type \"widget\"");
  EXPECT_EQ(
      schema_error(R"({"$ref": "https://example.com/s.json"})"),
      "JSON Schema at #/$ref: \"https://example.com/s.json\" is not \"#\" or a JSON pointer to a schema "
      "in this document");
  EXPECT_EQ(schema_error(R"({"pattern": "("})"),
            "JSON Schema at #/pattern: \"(\" is not a regular expression");
  EXPECT_EQ(schema_error(R"({"minLength": -1})"),
            "JSON Schema at #/minLength: expected a non-negative integer");
  // A keyword inside a referenced definition is found too.
  EXPECT_EQ(schema_error(R"({"$defs": {"a": {"if": {}}}, "$ref": "#/$defs/a"})"),
            "unsupported JSON Schema keyword 'if' at #/$defs/a");
  EXPECT_EQ(schema_error(R"({"title": "t", "description": "d", "default": 1, "examples": [1]})"), "accepted");
  // The validator does not pass a value it cannot judge: the schema's problem is the violation.
  EXPECT_EQ(violation(R"({"type": "string", "contentEncoding": "base64"})", R"("x")"),
            "$: not validated: unsupported JSON Schema keyword 'contentEncoding' at #");
}

TEST(ToolSchemaMore, ScenariosFileRefusesAToolSchemaItCannotCheck) {
  auto s = parse_tool_scenarios(
      R"({"scenarios": [{"name": "w", "tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "string", "contentMediaType": "a/b"}}}}}],
      "messages": [{"role": "user", "content": "hi"}], "turns": [{"expect": null}]}]})",
      "s.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "s.json: scenario 1 'w': tool 'f': unsupported JSON Schema keyword 'contentMediaType' at "
            "#/properties/x");
}

}  // namespace
}  // namespace mtp::gate
