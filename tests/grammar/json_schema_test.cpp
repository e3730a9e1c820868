// The JSON Schema compiler: for each supported keyword, strings drawn at random from the compiled grammar
// parse as JSON and satisfy the schema, checked by a validator written here from the JSON Schema
// specification (independent of the compiler); schemas it cannot express are refused naming the keyword.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <regex>

#include "grammar/matcher.h"

namespace mtp::grammar {
namespace {

using Json = nlohmann::ordered_json;

// ---- A validator for the keywords the compiler supports --------------------------------------------------

bool valid(const Json& schema, const Json& v, const Json& root);

bool has_type(const std::string& t, const Json& v) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

bool valid_format(const std::string& f, const std::string& s) {
  static const std::map<std::string, std::regex> formats = {
      {"date", std::regex(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))")},
      {"time", std::regex(R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))")},
      {"date-time",
       std::regex(
           R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))")},
      {"uuid", std::regex(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})")},
  };
  return std::regex_match(s, formats.at(f));
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool valid_object(const Json& schema, const Json& v, const Json& root) {
  const Json props = schema.value("properties", Json::object());
  for (const Json& name : schema.value("required", Json::array()))
    if (!v.contains(name.get<std::string>())) return false;
  for (const auto& [key, value] : v.items()) {
    if (props.contains(key)) {
      if (!valid(props[key], value, root)) return false;
    } else if (schema.contains("additionalProperties")) {
      if (!valid(schema["additionalProperties"], value, root)) return false;
    }
  }
  return true;
}

bool valid(const Json& schema, const Json& v, const Json& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    if (ref == "#") return valid(root, v, root);
    return valid(root.at(Json::json_pointer(ref.substr(1))), v, root);
  }
  if (schema.contains("const") && v != schema["const"]) return false;
  if (schema.contains("enum") &&
      std::find(schema["enum"].begin(), schema["enum"].end(), v) == schema["enum"].end())
    return false;
  if (schema.contains("anyOf")) {
    bool any = false;
    for (const Json& s : schema["anyOf"]) any = any || valid(s, v, root);
    if (!any) return false;
  }
  if (schema.contains("oneOf")) {
    int n = 0;
    for (const Json& s : schema["oneOf"]) n += valid(s, v, root);
    if (n != 1) return false;
  }
  if (schema.contains("type")) {
    const Json types = schema["type"].is_array() ? schema["type"] : Json::array({schema["type"]});
    bool any = false;
    for (const Json& t : types) any = any || has_type(t.get<std::string>(), v);
    if (!any) return false;
  }
  if (v.is_object() && !valid_object(schema, v, root)) return false;
  if (v.is_array()) {
    if (v.size() < schema.value("minItems", size_t{0}) || v.size() > schema.value("maxItems", SIZE_MAX))
      return false;
    if (schema.contains("items"))
      for (const Json& item : v)
        if (!valid(schema["items"], item, root)) return false;
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (code_points(s) < schema.value("minLength", size_t{0}) ||
        code_points(s) > schema.value("maxLength", SIZE_MAX))
      return false;
    if (schema.contains("format") && !valid_format(schema["format"], s)) return false;
  }
  return true;
}

TEST(SchemaValidator, RejectsWhatItShould) {  // the validator itself, so a pass below means something
  const Json s = Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"d":{"format":"date"}},
                               "required":["a"],"additionalProperties":false})");
  EXPECT_TRUE(valid(s, Json::parse(R"({"a":1,"d":"2026-12-05"})"), s));
  EXPECT_FALSE(valid(s, Json::parse(R"({"d":"2026-12-05"})"), s));
  EXPECT_FALSE(valid(s, Json::parse(R"({"a":1.5})"), s));
  EXPECT_FALSE(valid(s, Json::parse(R"({"a":1,"d":"2026-13-05"})"), s));
  EXPECT_FALSE(valid(s, Json::parse(R"({"a":1,"x":2})"), s));
}

// ---- Random strings of a grammar -------------------------------------------------------------------------

// One string drawn byte by byte from the language; past `soft_cap` bytes it prefers bytes that close things,
// so the walk ends. Empty when it did not finish within 4 * soft_cap bytes.
std::string sample(Matcher& m, std::mt19937& rng, size_t soft_cap) {
  std::string out;
  Matcher::StateId s = m.start();
  const std::string closers = "\"}]0123456789-TZ:";
  while (out.size() < 4 * soft_cap) {
    if (m.is_complete(s) && (out.size() > soft_cap || rng() % 8 == 0)) return out;
    std::vector<uint8_t> allowed;
    for (int b = 0; b < 256; ++b) {
      auto next = m.step(s, static_cast<uint8_t>(b));
      EXPECT_TRUE(next.ok());
      if (*next != Matcher::kReject) allowed.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) return m.is_complete(s) ? out : "";
    std::vector<uint8_t> preferred;
    if (out.size() > soft_cap)
      for (uint8_t b : allowed)
        if (closers.find(static_cast<char>(b)) != std::string::npos) preferred.push_back(b);
    const auto& from = preferred.empty() ? allowed : preferred;
    const uint8_t b = from[rng() % from.size()];
    out += static_cast<char>(b);
    s = *m.step(s, b);
  }
  return "";
}

void expect_samples_validate(const std::string& schema_text, int n = 40) {
  const Json schema = Json::parse(schema_text);
  auto gbnf = json_schema_to_gbnf(schema);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  auto g = parse_gbnf(*gbnf);
  ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << *gbnf;
  auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
  ASSERT_TRUE(m.ok());
  std::mt19937 rng(7);
  int finished = 0;
  for (int i = 0; i < n; ++i) {
    const std::string text = sample(*m, rng, 60);
    if (text.empty()) continue;
    ++finished;
    const Json value = Json::parse(text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << "not JSON: " << text << "\n" << *gbnf;
    EXPECT_TRUE(valid(schema, value, schema)) << "invalid: " << text << "\nschema " << schema_text;
  }
  EXPECT_GT(finished, n / 2) << *gbnf;
}

TEST(JsonSchema, PrimitiveTypes) {
  for (const char* t : {"string", "number", "integer", "boolean", "null"})
    expect_samples_validate(str_cat(R"({"type":")", t, R"("})"));
  expect_samples_validate(R"({"type":["integer","null"]})");
  expect_samples_validate(R"({})");
  expect_samples_validate(R"(true)");
}

TEST(JsonSchema, ObjectsRequiredOptionalAndAdditional) {
  expect_samples_validate(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
      "email":{"type":"string"}},"required":["age"]})");
  expect_samples_validate(R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"}}})");
  expect_samples_validate(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],
      "additionalProperties":{"type":"string"}})");
  expect_samples_validate(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  expect_samples_validate(R"({"type":"object"})");
}

TEST(JsonSchema, EnumConstAnyOfOneOf) {
  expect_samples_validate(R"({"enum":["celsius","fahrenheit",3,null,{"k":"v\"q"}]})");
  expect_samples_validate(R"({"const":"exactly \u00e9"})");
  expect_samples_validate(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":3}]})");
  expect_samples_validate(R"({"oneOf":[{"type":"boolean"},{"type":"array","items":{"type":"null"}}]})");
}

TEST(JsonSchema, ArraysWithBounds) {
  expect_samples_validate(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":4})");
  expect_samples_validate(R"({"type":"array","items":{"type":"string"},"minItems":1})");
  expect_samples_validate(R"({"type":"array","maxItems":2})");
  expect_samples_validate(R"({"type":"array","maxItems":0})");
}

TEST(JsonSchema, RefsAndDefsWithRecursion) {
  expect_samples_validate(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},
      "$ref":"#/$defs/node"})");
  expect_samples_validate(R"({"definitions":{"pt":{"type":"array","items":{"type":"number"},"minItems":2,
      "maxItems":2}},"type":"object","properties":{"from":{"$ref":"#/definitions/pt"},"to":{"$ref":"#/definitions/pt"}},
      "required":["from","to"],"additionalProperties":false})");
}

TEST(JsonSchema, StringFormatsAndLengths) {
  for (const char* f : {"date", "time", "date-time", "uuid"})
    expect_samples_validate(str_cat(R"({"type":"string","format":")", f, R"("})"));
  expect_samples_validate(R"({"type":"string","minLength":2,"maxLength":5})");
}

TEST(JsonSchema, ATypicalToolSchema) {
  expect_samples_validate(R"({"type":"object","title":"get_weather","description":"d","properties":{
      "location":{"type":"string","description":"City"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},
      "days":{"type":"integer"},"when":{"type":"string","format":"date"}},"required":["location","unit"],
      "additionalProperties":false})");
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  auto error = [](const char* text) {
    auto g = json_schema_to_gbnf(Json::parse(text));
    return g.ok() ? std::string() : g.status().message();
  };
  EXPECT_EQ(error(R"({"type":"string","pattern":"^a+$"})"), "unsupported JSON Schema keyword 'pattern' at #");
  EXPECT_EQ(error(R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})"),
            "unsupported JSON Schema keyword 'minimum' at #/properties/n");
  EXPECT_EQ(error(R"({"allOf":[{"type":"string"}]})"), "unsupported JSON Schema keyword 'allOf' at #");
  EXPECT_EQ(error(R"({"type":"string","format":"email"})"),
            "unsupported JSON Schema string format 'email' at # (supported: date, time, date-time, uuid)");
  EXPECT_EQ(
      error(R"({"$ref":"https://example.com/s.json"})"),
      "JSON Schema at #: '$ref' \"https://example.com/s.json\" is not \"#\" or a name in the root's $defs or "
      "definitions");
  EXPECT_EQ(error(R"({"type":"widget"})"), "JSON Schema at #: unknown type 'widget'");
  EXPECT_EQ(error(R"({"type":"array","minItems":3,"maxItems":1})"),
            "JSON Schema at #: maxItems is below minItems");
  EXPECT_EQ(error(R"(false)"), "JSON Schema at #: 'false' matches nothing");
}

TEST(JsonSchema, JsonObjectGrammarTakesObjectsOnly) {
  auto g = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(g.ok());
  auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->is_complete(*m->advance(m->start(), R"({"a": [1, {"b": null}], "c": "d"})")));
  EXPECT_EQ(*m->advance(m->start(), "[1]"), Matcher::kReject);
  EXPECT_EQ(*m->advance(m->start(), "\"s\""), Matcher::kReject);
}

}  // namespace
}  // namespace mtp::grammar
